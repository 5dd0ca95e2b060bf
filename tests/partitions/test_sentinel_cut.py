"""The Redis Sentinel primary's host cut from its replica, the sentinels and every app host.

Four hosts in namespaces: ``data`` (the primary and a sentinel; PostgreSQL on the db segment,
so the database stays reachable), ``data2`` (the replica and a sentinel), hostB and hostC
(web, worker, beat; hostC runs the third sentinel, the ``sentinel`` role). Submissions go on
through the cut: the sentinels promote the replica, the platform follows them, the old
primary rejoins as a replica at the heal. Judged by the history checker: every 202 kept and
done once, nothing refused kept. Without TLS: the group's TLS settings are ADR 25's, not what
is tested here.
"""

from __future__ import annotations

import os
import string
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import requests

from tests.documents.tally import sample_text
from tests.history import History, check, documents_history
from tests.hosts.cluster import AppHost, DataHost, HostRedis, app_host
from tests.hosts.conftest import FAST
from tests.netns import Network, build_network
from tests.partitions.worker_cut import finished
from tests.procs import ROOT, Proc, Web, spawn, wait_until
from tests.scheduler.beats import BEAT_ENV
from tests.sentinel import DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS, MASTER_NAME

pytestmark = [pytest.mark.processes, pytest.mark.partitions]

SENTINEL_PORT = 26379
CUT_S = 15.0
SUBMIT_EVERY_S = 0.5


@dataclass
class Group:
    net: Network
    data: DataHost
    replica: HostRedis
    sentinels: list[Proc]
    hosts: dict[str, AppHost]
    sentinel_password: str

    def primary(self) -> str | None:
        """The primary's address as the reachable sentinels say."""
        for host in ("data2", "hostC", "data"):
            try:
                client = redis.Redis(host=self.net.hosts[host].back, port=SENTINEL_PORT,
                                     password=self.sentinel_password, socket_timeout=1,
                                     socket_connect_timeout=1, decode_responses=True)
                address = client.sentinel_get_master_addr_by_name(MASTER_NAME)
                if address:
                    return str(address[0])
            except redis.RedisError:
                continue
        return None

    def stop(self) -> None:
        try:
            self.net.heal("data")
            for host in self.hosts.values():
                host.kill_all()
            for proc in self.sentinels:
                proc.stop()
            self.replica.stop()
            self.data.stop()
        finally:
            self.net.close()


def start_sentinel(base: Path, net: Network, host: str, *, primary: str, password: str,
                   sentinel_password: str) -> Proc:
    directory = base / f"sentinel-{host}"
    directory.mkdir(parents=True, exist_ok=True)
    conf = directory / "sentinel.conf"
    conf.write_text(string.Template((ROOT / "platform" / "sentinel.conf").read_text()).substitute(
        SENTINEL_PORT=SENTINEL_PORT, SENTINEL_BIND=net.hosts[host].back, SENTINEL_DIR=directory,
        SENTINEL_PASSWORD=sentinel_password, MASTER_NAME=MASTER_NAME, PRIMARY_HOST=primary,
        PRIMARY_PORT=6390, REDIS_PASSWORD=password, DOWN_AFTER_MS=DOWN_AFTER_MS,
        FAILOVER_TIMEOUT_MS=FAILOVER_TIMEOUT_MS))
    return spawn(f"sentinel-{host}", ["redis-server", str(conf), "--sentinel"],
                 env=dict(os.environ), log_dir=base / "log", netns=net.hosts[host].netns)


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    base = tmp_path_factory.mktemp("sentinel")
    net = build_network({"data": False, "data2": False, "hostB": True, "hostC": True},
                        db_segment=True)
    try:
        d, d2 = net.hosts["data"], net.hosts["data2"]
        data = DataHost(base / "data", address=d.back, netns=d.netns, db_address=d.db)
        replica = HostRedis(base / "data2", address=d2.back, netns=d2.netns)
        replica.password = data.redis.password  # one data password for the group
        replica.overrides.update({"replicaof": f"{d.back} 6390",
                                  "masterauth": data.redis.password})
        replica.start()
        sentinel_password = data.redis.password + "-sentinels"
        sentinels = [start_sentinel(base, net, host, primary=d.back,
                                    password=data.redis.password,
                                    sentinel_password=sentinel_password)
                     for host in ("data", "data2", "hostC")]
        fronts = ",".join(h.front or "" for h in net.hosts.values() if h.front)
        env = {"REDIS_SENTINELS": ",".join(f"{net.hosts[h].back}:{SENTINEL_PORT}"
                                           for h in ("data", "data2", "hostC")),
               "REDIS_SENTINEL_MASTER": MASTER_NAME, "REDIS_PASSWORD": data.redis.password,
               "REDIS_SENTINEL_PASSWORD": sentinel_password, "DJANGO_ALLOWED_HOSTS": fronts}
        hosts = {name: app_host(data, base, name=name, address=net.hosts[name].back,
                                netns=net.hosts[name].netns, front=net.hosts[name].front,
                                **FAST, **BEAT_ENV, **env)
                 for name in ("hostB", "hostC")}
    except BaseException:
        net.close()
        raise
    cluster = Group(net=net, data=data, replica=replica, sentinels=sentinels, hosts=hosts,
                    sentinel_password=sentinel_password)
    try:
        yield cluster
    except BaseException:
        print("\n".join(h.logs() for h in hosts.values()))
        raise
    finally:
        cluster.stop()


def test_the_sentinel_primarys_host_cut_off_fails_over_and_loses_no_acknowledged_document(
        group: Group, measure) -> None:
    d = group.net.hosts["data"]
    wait_until(lambda: group.replica.client().info("replication")["master_link_status"] == "up",
               timeout=30, what="the replica follows the primary")
    b, c = group.hosts["hostB"], group.hosts["hostC"]
    web: Web = c.start_web(workers=1)
    workers = [b.start_worker(), c.start_worker()]
    c.start_beat()
    b.start_beat()
    for host, worker in zip((b, c), workers, strict=True):
        host.wait_worker(worker, group.data.redis.client())
    c.wait_web(web)
    session = web.session()
    history = History()
    acked: list[int] = []
    statuses: list[int] = []
    answer_s: list[float] = []

    def submit(i: int) -> None:
        began = time.monotonic()
        try:
            response = session.post("/api/documents/", json={"title": f"sentinel {i}",
                                                             "text": sample_text(i)})
            status = response.status_code
        except requests.RequestException:
            status = 0
        statuses.append(status)
        answer_s.append(time.monotonic() - began)
        if status == 202:
            doc = int(response.json()["id"])
            acked.append(doc)
            history.add("acked", doc, host="client")
        else:
            history.add("refused", f"request {i}", host="client")

    for i in range(4):
        submit(i)
    promoted: list[float] = []
    stop = threading.Event()

    def watch() -> None:
        # Beside the client, whose requests may each wait seconds on the cut link.
        while not stop.is_set() and not promoted:
            if group.primary() == group.net.hosts["data2"].back:
                promoted.append(time.time())
            stop.wait(0.1)

    group.net.cut("data")
    cut_at = time.time()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    i = 4
    while time.time() < cut_at + CUT_S:
        submit(i)
        i += 1
        time.sleep(SUBMIT_EVERY_S)  # the client's pace, not a wait for a condition
    stop.set()
    watcher.join(timeout=5)
    assert promoted, "the replica was not promoted during the cut"
    promoted_at = promoted[0]
    during = list(statuses[4:])
    slowest_s = max(answer_s[4:])
    group.net.heal("data")
    healed_at = time.time()
    # The old primary rejoins as a replica of the new one.
    old = group.data.redis.client()
    wait_until(lambda: old.info("replication")["role"] == "slave", timeout=60,
               interval=0.5, what="the old primary rejoins as a replica")
    rejoined_s = time.time() - healed_at
    for j in range(i, i + 3):
        submit(j)
    wait_until(lambda: finished(group.data, acked), timeout=90, interval=0.5,
               what="every acknowledged document done")
    done_s = time.time() - healed_at
    documents_history(group.data, history, acked)
    verdict = check(history)
    measure(cut_s=CUT_S, promoted_after_s=round(promoted_at - cut_at, 1),
            answers_during={s: during.count(s) for s in sorted(set(during))},
            slowest_answer_during_s=round(slowest_s, 1),
            old_primary_replica_after_heal_s=round(rejoined_s, 1),
            all_done_after_heal_s=round(done_s, 1), **verdict.counts())
    verdict.assert_ok()
    assert d.back != group.primary()
