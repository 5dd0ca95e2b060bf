"""A Redis Sentinel group for tests: a primary, a replica and three sentinels on loopback.

Every node runs the platform's redis.conf with the data password; every sentinel runs
platform/sentinel.conf with its own password. Methods kill or freeze the primary or a
sentinel, wait for the promotion, and bring an old primary back (it must rejoin as a
replica). ``TEST_REDIS=sentinel`` makes every ``tests.procs.Stack`` run on such a group.
"""

from __future__ import annotations

import os
import secrets
import signal
import string
from pathlib import Path
from typing import Any

import redis
from redis.sentinel import Sentinel

from tests.procs import ROOT, Proc, RedisServer, RedisURL, free_port, spawn, wait_until

MASTER_NAME = "platform"
# Test timings, given to the sentinels through their config: a primary that does not answer
# for 2 s is down (production: 5 s, platform/sentinel.conf says why); a failover that has not
# finished in 10 s may be retried. 1 s was tried: on this shared 2-core machine a freshly
# promoted primary stalled past it (its CONFIG REWRITE's fsync) and was failed over again a
# second later, to the old primary just restarted and not yet synced.
DOWN_AFTER_MS = int(os.environ.get("TEST_SENTINEL_DOWN_AFTER_MS", "2000"))
FAILOVER_TIMEOUT_MS = int(os.environ.get("TEST_SENTINEL_FAILOVER_TIMEOUT_MS", "10000"))
SENTINELS = 3


class SentinelProc:
    """One sentinel: ``redis-server <conf> --sentinel`` on a free port."""

    def __init__(self, base_dir: Path, index: int, *, group: SentinelGroup) -> None:
        self.dir = base_dir / f"sentinel{index}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.index = index
        self.port = free_port()
        self.group = group
        self.proc: Proc | None = None
        self.conf = self.dir / "sentinel.conf"

    def start(self, *, primary_port: int) -> SentinelProc:
        if not self.conf.exists():  # a restarted sentinel keeps what it has learnt
            template = string.Template((ROOT / "platform" / "sentinel.conf").read_text())
            self.conf.write_text(template.substitute(
                SENTINEL_PORT=self.port, SENTINEL_BIND="127.0.0.1 ::1", SENTINEL_DIR=self.dir,
                SENTINEL_PASSWORD=self.group.sentinel_password, MASTER_NAME=MASTER_NAME,
                PRIMARY_HOST="127.0.0.1", PRIMARY_PORT=primary_port,
                REDIS_PASSWORD=self.group.password, DOWN_AFTER_MS=DOWN_AFTER_MS,
                FAILOVER_TIMEOUT_MS=FAILOVER_TIMEOUT_MS))
        self.proc = spawn(f"sentinel{self.index}", ["redis-server", str(self.conf), "--sentinel"],
                          env=dict(os.environ), log_dir=self.group.log_dir)
        wait_until(lambda: self.client().ping(), timeout=30, what=f"sentinel{self.index} up")
        return self

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.group.sentinel_password,
                           decode_responses=True, socket_timeout=2, socket_connect_timeout=2)

    def master(self) -> dict[str, Any]:
        return self.client().sentinel_master(MASTER_NAME)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def log(self) -> str:
        return self.proc.log() if self.proc is not None else ""


class SentinelGroup:
    """Two data nodes (one primary, one replica) and three sentinels, passwords everywhere."""

    def __init__(self, base_dir: Path, *, overrides: dict[str, str] | None = None) -> None:
        self.base_dir = base_dir
        self.log_dir = base_dir / "log"
        self.password = secrets.token_urlsafe(16)
        self.sentinel_password = secrets.token_urlsafe(16)
        self.overrides = overrides or {}
        self.nodes = [RedisServer(base_dir / f"node{i}", overrides=self.overrides,
                                  topology="single", name=f"redis-node{i}")
                      for i in range(2)]
        for node in self.nodes:
            node.password = self.password
            node.log_dir = self.log_dir
            # A replica (or a demoted primary) authenticates to its primary with this.
            node.overrides = {"masterauth": self.password, **node.overrides}
        self.sentinels = [SentinelProc(base_dir, i, group=self) for i in range(SENTINELS)]

    # --- start and stop ------------------------------------------------------------------
    def start(self) -> SentinelGroup:
        primary, replica = self.nodes
        primary.start()
        replica.overrides = {**replica.overrides, "replicaof": f"127.0.0.1 {primary.port}"}
        replica.start()
        replica.overrides.pop("replicaof")  # from now on the sentinels say who follows whom
        self.wait_replica_synced(replica)
        for sentinel in self.sentinels:
            sentinel.start(primary_port=primary.port)
        self.wait_settled()
        return self

    def stop(self) -> None:
        for sentinel in self.sentinels:
            if sentinel.proc is not None:
                sentinel.proc.stop()
        for node in self.nodes:
            node.stop()

    def wait_settled(self, timeout: float = 30) -> None:
        """Every live sentinel knows the replica and the other live sentinels."""
        def settled() -> bool:
            live = [s for s in self.sentinels if s.alive()]
            for sentinel in live:
                master = sentinel.master()
                if int(master["num-other-sentinels"]) < len(live) - 1:
                    return False
                if int(master["num-slaves"]) < 1:
                    return False
            return True

        wait_until(settled, timeout=timeout, what="sentinels know each other and the replica")

    # --- who is who ----------------------------------------------------------------------
    def primary_port(self) -> int:
        """The primary's port, as the first live sentinel that answers says."""
        for sentinel in self.sentinels:
            if sentinel.alive():
                try:
                    _host, port = sentinel.client().sentinel_get_master_addr_by_name(
                        MASTER_NAME)
                    return int(port)
                except redis.RedisError:
                    continue
        raise RuntimeError("no sentinel answers")

    def primary(self) -> RedisServer:
        port = self.primary_port()
        return next(node for node in self.nodes if node.port == port)

    def replica_of(self, primary: RedisServer) -> RedisServer:
        return next(node for node in self.nodes if node is not primary)

    def client(self, **kwargs: Any) -> redis.Redis:
        """A client of whichever node is primary now (asks the sentinels per connection)."""
        sentinel = Sentinel([("127.0.0.1", s.port) for s in self.sentinels],
                            sentinel_kwargs={"password": self.sentinel_password,
                                             "socket_timeout": 1, "socket_connect_timeout": 1},
                            password=self.password)
        return sentinel.master_for(MASTER_NAME, decode_responses=True,
                                   socket_timeout=kwargs.pop("socket_timeout", 5), **kwargs)

    def env(self) -> dict[str, str]:
        """What a platform process needs to reach the group (config/settings/base.py)."""
        return {
            "REDIS_SENTINELS": ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels),
            "REDIS_SENTINEL_MASTER": MASTER_NAME,
            "REDIS_PASSWORD": self.password,
            "REDIS_SENTINEL_PASSWORD": self.sentinel_password,
            # Where the nightly backup copies the append-only file from: the first primary's
            # (a backup on a Sentinel host copies that host's own node).
            "REDIS_DATA_DIR": str(self.nodes[0].dir),
        }

    # --- failures ------------------------------------------------------------------------
    def kill_primary(self, sig: int = signal.SIGKILL) -> RedisServer:
        """Signal the current primary (SIGKILL: it is gone; SIGSTOP: frozen); returns it."""
        primary = self.primary()
        assert primary.proc is not None
        primary.proc.signal(sig)
        if sig == signal.SIGKILL:
            primary.proc.wait_exit(timeout=30)
        return primary

    def wait_promotion(self, old: RedisServer, timeout: float = 30) -> RedisServer:
        """Wait until every live sentinel names another node, and that node is a primary."""
        def promoted() -> RedisServer | None:
            ports = {int(s.client().sentinel_get_master_addr_by_name(MASTER_NAME)[1])
                     for s in self.sentinels if s.alive()}
            if len(ports) != 1 or old.port in ports:
                return None
            new = next(node for node in self.nodes if node.port in ports)
            return new if new.client().info("replication")["role"] == "master" else None

        return wait_until(promoted, timeout=timeout, what="a replica promoted", interval=0.05)

    def bring_back(self, node: RedisServer, timeout: float = 60) -> RedisServer:
        """Restart a killed node on its port and data; wait until it is a synced replica."""
        if node.proc is not None and node.proc.alive():
            node.proc.signal(signal.SIGCONT)
            node.kill(signal.SIGKILL)
        node.start()
        self.wait_replica_synced(node, timeout=timeout)
        return node

    def wait_replica_synced(self, node: RedisServer, timeout: float = 60) -> None:
        def synced() -> bool:
            info = node.client().info("replication")
            return info["role"] == "slave" and info.get("master_link_status") == "up"

        wait_until(synced, timeout=timeout, what=f"node on {node.port} a synced replica")

    def kill_sentinel(self, index: int, sig: int = signal.SIGKILL) -> SentinelProc:
        sentinel = self.sentinels[index]
        assert sentinel.proc is not None
        sentinel.proc.signal(sig)
        if sig == signal.SIGKILL:
            sentinel.proc.wait_exit(timeout=30)
        return sentinel

    def failovers(self) -> int:
        """Failovers any live sentinel has started (its log's ``+try-failover`` lines)."""
        return sum(s.log().count("+try-failover") for s in self.sentinels)


class SentinelRedis(RedisServer):
    """A Stack's Redis under TEST_REDIS=sentinel: a SentinelGroup behind RedisServer's methods.

    ``url`` is the current primary's (with the group's environment for child processes),
    ``client()`` follows the primary through failovers, ``kill()`` kills the current primary
    (a failover follows) and ``restart()`` brings the killed node back as a replica.
    """

    def __init__(self, base_dir: Path, *, overrides: dict[str, str] | None = None,
                 topology: str | None = None, name: str = "redis") -> None:
        super().__init__(base_dir, overrides=overrides, topology="single", name=name)
        self.group = SentinelGroup(base_dir / "sentinel-group", overrides=overrides)
        self.group.log_dir = self.log_dir
        for node in self.group.nodes:
            node.log_dir = self.log_dir
        self.password = self.group.password
        self.killed: RedisServer | None = None

    @property
    def url(self) -> str:
        primary = self.group.primary()
        return RedisURL(primary.url, env=self.group.env())

    def client(self, **kwargs: Any) -> redis.Redis:
        return self.group.client(**kwargs)

    def start(self) -> SentinelRedis:
        self.group.start()
        self.starts += 1
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.killed = self.group.kill_primary(sig)

    def restart(self) -> SentinelRedis:
        if self.killed is not None:
            old, self.killed = self.killed, None
            self.group.wait_promotion(old)
            self.group.bring_back(old)
        return self

    def stop(self) -> None:
        self.group.stop()
