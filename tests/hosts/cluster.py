"""Several "hosts" on one machine: each on its own loopback address, data directory and name.

Linux routes all of 127.0.0.0/8 to the loopback interface, so 127.0.0.2, 127.0.0.3, ... bind
with no setup. The data host runs Redis and PostgreSQL bound to its address only, with
passwords (and TLS when asked); each app host runs the processes of its roles with
``PLATFORM_ROLES``, ``PLATFORM_HOST_NAME`` and the data host's addresses, exactly the
environment an operator gives a real host (README, "Several hosts").
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import redis
import requests

from tests.pgserver import PostgresServer
from tests.procs import BIN, QUEUES, ROOT, Proc, RedisServer, Web, child_env, spawn, wait_until

DATA_ADDRESS = "127.0.0.2"
# The platform's ports, used on hosts in namespaces of their own (platform/up's defaults).
REDIS_PORT, POSTGRES_PORT, WEB_PORT = 6390, 5432, 8000
CERTS = ROOT / "platform" / "certs"


def free_port_on(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def make_certs(directory: Path, *, name: str, addresses: list[str]) -> Path:
    """The operator's recipe (platform/certs): a private CA and the data host's pair."""
    for args in (["ca", str(directory)], ["server", str(directory), name, *addresses]):
        subprocess.run([str(CERTS), *args], check=True, capture_output=True, timeout=60)
    return directory


class HostRedis(RedisServer):
    """The platform's redis.conf bound to one address, optionally TLS only (``port 0``)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> HostRedis:
        # Always a single server on its address (RedisServer's __new__ would pick a Sentinel
        # group under TEST_REDIS=sentinel); the Sentinel topology is tests/failover's.
        return object.__new__(cls)

    def __init__(self, base_dir: Path, *, address: str, tls_dir: Path | None = None,
                 tls_name: str = "data", netns: str | None = None) -> None:
        self.address = address
        self.tls_dir = tls_dir
        overrides = {"bind": address}
        if tls_dir is not None:
            # TLS only: the plain port closed, every client verifies the server's certificate
            # against the CA; clients authenticate with the password, not a certificate.
            overrides.update({
                "tls-cert-file": str(tls_dir / f"{tls_name}.pem"),
                "tls-key-file": str(tls_dir / f"{tls_name}.key"),
                "tls-ca-cert-file": str(tls_dir / "ca.pem"),
                "tls-auth-clients": "no",
            })
        super().__init__(base_dir, overrides=overrides, topology="single",
                         name=f"redis-{address}")
        # In a host's own namespace (tests/netns.py) the platform's port is free by
        # construction; on a shared loopback any free one.
        self.netns = netns
        self.port = REDIS_PORT if netns is not None else free_port_on(address)
        if tls_dir is not None:
            self.overrides.update({"tls-port": str(self.port), "port": "0"})

    @property
    def url(self) -> str:
        scheme = "rediss" if self.tls_dir is not None else "redis"
        return f"{scheme}://:{self.password}@{self.address}:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        if self.tls_dir is not None:
            kwargs = {"ssl_cert_reqs": "required",
                      "ssl_ca_certs": str(self.tls_dir / "ca.pem"), **kwargs}
        return redis.Redis.from_url(self.url, decode_responses=True, socket_timeout=5, **kwargs)


@dataclass
class DataHost:
    """Redis and PostgreSQL on one address, with passwords; the database migrated once."""

    base_dir: Path
    address: str = DATA_ADDRESS
    tls_dir: Path | None = None
    migrate: bool = True  # False: an empty database (platform/up migrates it itself)
    netns: str | None = None  # its own network namespace (tests/netns.py), else loopback
    db_address: str | None = None  # PostgreSQL's own address (a db segment), else ``address``
    redis: HostRedis = field(init=False)
    postgres: PostgresServer = field(init=False)
    database_url: str = field(init=False)

    def __post_init__(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.redis = HostRedis(self.base_dir, address=self.address, tls_dir=self.tls_dir,
                               netns=self.netns)
        self.redis.start()
        tls_env = {}
        if self.tls_dir is not None:
            tls_env = {"POSTGRES_TLS_CERT": str(self.tls_dir / "data.pem"),
                       "POSTGRES_TLS_KEY": str(self.tls_dir / "data.key"),
                       "POSTGRES_TLS_ONLY": "yes"}
        self.postgres = _postgres(self.base_dir / "log", host=self.db_address or self.address,
                                  env=tls_env, netns=self.netns)
        name = "platform"
        self.postgres.create_database(name)
        self.database_url = self.postgres.url(name) + self._sslparams()
        if not self.migrate:
            return
        # The schema and the test login, as the first app host's `manage.py migrate` would.
        manage_on(self.base_dir, self.app_env(self.base_dir / "migrate", host="migrate"),
                  "migrate", "--noinput", "-v", "0")
        manage_on(self.base_dir, self.app_env(self.base_dir / "migrate", host="migrate"),
                  "createsuperuser", "--noinput", "--username", "tester",
                  "--email", "tester@example.com",
                  DJANGO_SUPERUSER_PASSWORD="tester-password-1")

    def _sslparams(self) -> str:
        if self.tls_dir is None:
            return ""
        return f"?sslmode=verify-full&sslrootcert={self.tls_dir / 'ca.pem'}"

    def app_env(self, var_dir: Path, *, host: str, roles: str = "web,workers,beat",
                **overrides: str) -> dict[str, str]:
        """The environment of an app host: its roles and name, the data host's addresses."""
        env = child_env(var_dir, database=var_dir / "unused.sqlite3",
                        redis_url=self.redis.url, **overrides)
        env.update({
            "DATABASE_URL": self.database_url,
            "PLATFORM_ROLES": roles,
            "PLATFORM_HOST_NAME": host,
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost,127.0.0.3,127.0.0.4,127.0.0.5",
        })
        if self.tls_dir is not None:
            env.update({"REDIS_TLS_CA_FILE": str(self.tls_dir / "ca.pem"),
                        "PLATFORM_REQUIRE_TLS": "true"})
        env.update(overrides)
        return env

    def query(self, sql: str, *params: Any) -> list[Any]:
        with self.postgres.db("platform") as conn:
            return list(conn.execute(sql, params).fetchall())

    def stop(self) -> None:
        self.redis.stop()
        self.postgres.stop()


def _postgres(log_dir: Path, *, host: str, env: dict[str, str],
              netns: str | None = None) -> PostgresServer:
    """tests/pgserver.py's server, with platform/postgres's TLS variables when given."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # platform/postgres reads them at init and at every start
    try:
        port = POSTGRES_PORT if netns is not None else None
        return PostgresServer(log_dir, host=host, port=port, netns=netns).start()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def manage_on(base_dir: Path, env: dict[str, str], *args: str,
              **extra: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT,
                            env={**env, **extra}, capture_output=True, text=True, timeout=180)
    if result.returncode != 0:
        raise RuntimeError(f"manage.py {args[0]} failed:\n{result.stderr[-3000:]}")
    return result


@dataclass
class AppHost:
    """One app host: its own address, data directory and name, the data host's addresses."""

    name: str
    address: str
    base_dir: Path
    env: dict[str, str]
    procs: list[Proc] = field(default_factory=list)
    netns: str | None = None  # its own network namespace (tests/netns.py), else loopback
    front: str | None = None  # where clients reach its web (in a namespace: the front link)

    @property
    def log_dir(self) -> Path:
        return self.base_dir / "log"

    def start_worker(self, name: str = "worker1", *, concurrency: int = 1,
                     **env: str) -> Proc:
        """A worker named ``<name>@<host name>``, as supervisord names it on a real host."""
        node = f"{name}@{self.name}"
        proc = spawn(f"{self.name}-{name}", [
            str(BIN / "celery"), "-A", "celery_conf", "worker", "-n", node,
            "-Q", QUEUES, "-c", str(concurrency), "--loglevel", "INFO",
        ], env={**self.env, **env}, log_dir=self.log_dir, netns=self.netns)
        self.procs.append(proc)
        return proc

    def wait_worker(self, proc: Proc, client: redis.Redis, name: str = "worker1") -> None:
        node = f"{name}@{self.name}"

        def ready() -> bool:
            if not proc.alive():
                raise AssertionError(f"{node} exited:\n{proc.log()[-3000:]}")
            return bool(client.exists(f"platform:worker:{node}")) and " ready." in proc.log()

        wait_until(ready, timeout=90, what=f"worker {node} ready")

    def start_beat(self, name: str = "beat1", **env: str) -> Proc:
        proc = spawn(f"{self.name}-{name}", [
            str(BIN / "celery"), "-A", "celery_conf", "beat",
            "-S", "scheduler.redbeat:FencedRedBeatScheduler", "--loglevel", "INFO",
        ], env={**self.env, "BEAT_NAME": f"{name}.{self.name}", **env}, log_dir=self.log_dir,
            netns=self.netns)
        self.procs.append(proc)
        return proc

    def start_web(self, *, workers: int = 1, scheme_args: tuple[str, ...] = ()) -> Web:
        address = self.front or self.address
        port = WEB_PORT if self.netns is not None else free_port_on(address)
        proc = spawn(f"{self.name}-web", [
            str(BIN / "uvicorn"), "config.asgi:application", "--host", address,
            "--port", str(port), "--workers", str(workers), "--no-access-log", *scheme_args,
        ], env=self.env, log_dir=self.log_dir, netns=self.netns)
        self.procs.append(proc)
        return Web(proc=proc, base=f"http://{address}:{port}")

    def wait_web(self, web: Web, *, workers: int = 1) -> Web:
        def up() -> bool:
            if not web.proc.alive():
                raise AssertionError(f"web on {self.name} exited:\n{web.proc.log()[-3000:]}")
            return (web.proc.log().count("Application startup complete.") >= workers
                    and requests.get(web.base + "/accounts/login/", timeout=2).ok)

        wait_until(up, timeout=90, what=f"web on {self.name} answers")
        return web

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()

    def kill_all(self) -> None:
        for proc in self.procs:
            proc.signal(signal.SIGKILL, group=True)

    def logs(self) -> str:
        return "\n".join(f"----- {p.name} -----\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(self.log_dir.glob("*.log")))


def app_host(data: DataHost, base_dir: Path, *, name: str, address: str,
             roles: str = "web,workers,beat", netns: str | None = None,
             front: str | None = None, **env: str) -> AppHost:
    var_dir = base_dir / name
    var_dir.mkdir(parents=True, exist_ok=True)
    return AppHost(name=name, address=address, base_dir=var_dir,
                   env=data.app_env(var_dir, host=name, roles=roles, **env),
                   netns=netns, front=front)


def new_password() -> str:
    return secrets.token_urlsafe(16)


class Stoppable(Protocol):
    def logs(self) -> str: ...
    def stop(self) -> None: ...


@contextmanager
def running(cluster: Stoppable) -> Iterator[None]:
    """A module fixture's hosts: their logs printed if anything fails, stopped however it ends."""
    try:
        yield
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()
