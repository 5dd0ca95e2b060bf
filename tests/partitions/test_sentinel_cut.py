"""The Redis Sentinel primary's host split from its replicas and the sentinels' majority,
with one app host still on its side: what the old primary accepted is lost as it rejoins.

Five hosts in namespaces, the switch split in two (``Network.split``):

- the old side: ``data`` (the primary and a sentinel; PostgreSQL on the db segment, which
  every host still reaches) and hostB (web, worker, beat);
- the majority: ``data2`` and ``data3`` (replicas; a sentinel on data2) and hostC (web,
  worker, beat, the third sentinel).

The majority's sentinels promote a replica and hostC follows them. hostB can ask only the
sentinel on ``data``, which still names the old primary, so it goes on writing there. At the
heal the old primary is made a replica of the new one and resyncs: everything written to it
during the split is gone. Run twice: as shipped (no ``min-replicas-to-write``), and with
``min-replicas-to-write 1`` / ``min-replicas-max-lag 10`` on every data server, which makes
the old primary refuse writes once it has heard from no replica for 10 s. Judged by the
history checker: every 202 kept and done once, nothing refused kept. Over TLS as shipped:
every Redis and sentinel TLS only, the sentinels' files written by the installer's own
writer (platform/release.sh), replication and monitoring over TLS.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import requests

from scheduler.fence import parse_journal
from tests.documents.tally import sample_text
from tests.history import History, check, documents_history, journal_history, slots_history
from tests.hosts.cluster import AppHost, DataHost, HostRedis, app_host, make_certs
from tests.hosts.conftest import FAST
from tests.hosts.test_sentinel_hosts import installed_conf
from tests.netns import Network, build_network
from tests.partitions.test_beat_cut import JOURNAL_KEY, host_of
from tests.partitions.worker_cut import finished
from tests.procs import Proc, Web, spawn, wait_until
from tests.scheduler.beats import BEAT_ENV, EVERY
from tests.sentinel import MASTER_NAME

pytestmark = [pytest.mark.processes, pytest.mark.partitions]

SENTINEL_PORT = 26379
SPLIT_S = 20.0  # past min-replicas-max-lag (10 s), so that the old primary starts refusing
SUBMIT_EVERY_S = 0.5
OLD_SIDE = ["data", "hostB"]
# The recommended setting with two replicas (docs/past-one-box/sentinel.md).
MIN_REPLICAS = {"min-replicas-to-write": "1", "min-replicas-max-lag": "10"}
# Every list's length and every hash's size, one script run: what a Redis holds.
HOLDINGS = """
local out = {}
for _, key in ipairs(redis.call('KEYS', '*')) do
  local kind = redis.call('TYPE', key).ok
  if kind == 'list' then table.insert(out, key .. '=' .. redis.call('LLEN', key))
  elseif kind == 'hash' and key == 'unacked' then
    table.insert(out, key .. '=' .. redis.call('HLEN', key))
  end
end
return out
"""


@dataclass
class Group:
    net: Network
    data: DataHost
    replicas: list[HostRedis]
    sentinels: list[Proc]
    hosts: dict[str, AppHost]
    sentinel_password: str
    certs: Path

    def primary(self) -> str | None:
        """The primary's address as the reachable sentinels say (the majority's first)."""
        for host in ("data2", "hostC", "data"):
            try:
                client = redis.Redis(host=self.net.hosts[host].back, port=SENTINEL_PORT,
                                     password=self.sentinel_password, socket_timeout=1,
                                     socket_connect_timeout=1, decode_responses=True,
                                     ssl=True, ssl_ca_certs=str(self.certs / "ca.pem"))
                address = client.sentinel_get_master_addr_by_name(MASTER_NAME)
                if address:
                    return str(address[0])
            except redis.RedisError:
                continue
        return None

    def old_primary(self, *command: str) -> str:
        """A command to ``data``'s Redis from inside the old side (the test process is with
        the majority during the split), by redis-cli with an argument list."""
        redis_server = self.data.redis
        result = subprocess.run(
            ["ip", "netns", "exec", self.net.hosts["data"].netns, "redis-cli", "--no-auth-warning",
             "--tls", "--cacert", str(self.certs / "ca.pem"),
             "-h", redis_server.address, "-p", str(redis_server.port), "-a",
             redis_server.password, *command], capture_output=True, text=True, timeout=30)
        return result.stdout.strip()

    def primary_client(self) -> redis.Redis:
        """The primary the sentinels name now."""
        address = self.primary()
        server = next(r for r in [self.data.redis, *self.replicas] if r.address == address)
        return server.client()

    def logs(self) -> str:
        return "\n".join(host.logs() for host in self.hosts.values())

    def stop(self) -> None:
        try:
            self.net.join(OLD_SIDE)
            for host in self.hosts.values():
                host.kill_all()
            for proc in self.sentinels:
                proc.stop()
            for replica in self.replicas:
                replica.stop()
            self.data.stop()
        finally:
            self.net.close()


def start_sentinel(base: Path, net: Network, host: str, *, primary: str, password: str,
                   sentinel_password: str, certs: Path) -> Proc:
    """A sentinel from the installer's writer (write_sentinel_conf_for), with REDIS_TLS."""
    prefix = base / f"sentinel-{host}"
    conf = prefix / "var/lib/platform/sentinel/sentinel.conf"
    installed_conf(prefix, {
        "PLATFORM_ROLES": "sentinel", "REDIS_SENTINEL_PRIMARY": f"{primary} 6390",
        "SENTINEL_PORT": str(SENTINEL_PORT), "SENTINEL_BIND": net.hosts[host].back,
        "REDIS_PASSWORD": password, "REDIS_SENTINEL_PASSWORD": sentinel_password,
        "REDIS_TLS": "true", "REDIS_TLS_CERT": str(certs / "data.pem"),
        "REDIS_TLS_KEY": str(certs / "data.key"), "REDIS_TLS_CA_FILE": str(certs / "ca.pem")},
        "write_sentinel_conf_for", conf)
    return spawn(f"sentinel-{host}", ["redis-server", str(conf), "--sentinel"],
                 env=dict(os.environ), log_dir=base / "log", netns=net.hosts[host].netns)


@pytest.fixture(scope="module", params=["as shipped", "min-replicas-to-write 1"])
def group(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    base = tmp_path_factory.mktemp("sentinel")
    extra = MIN_REPLICAS if request.param != "as shipped" else {}
    net = build_network({"data": False, "data2": False, "data3": False, "hostB": True,
                         "hostC": True}, db_segment=True)
    try:
        d = net.hosts["data"]
        # One certificate for every data server and sentinel of the group, by address.
        certs = make_certs(base / "certs", name="data", addresses=[
            net.hosts[h].back for h in ("data", "data2", "data3", "hostC")]
            + [d.db or "", net.root_back])
        data = DataHost(base / "data", address=d.back, netns=d.netns, db_address=d.db,
                        tls_dir=certs)
        # As the installer's redis.conf has it (platform/lib.sh, redis_tls_lines): the old
        # primary rejoins as a replica over TLS.
        for key, value in {"tls-replication": "yes", **extra}.items():
            data.redis.client().config_set(key, value)
        replicas = []
        for name in ("data2", "data3"):
            replica = HostRedis(base / name, address=net.hosts[name].back,
                                netns=net.hosts[name].netns, tls_dir=certs)
            replica.password = data.redis.password  # one data password for the group
            replica.overrides.update({"replicaof": f"{d.back} 6390", "tls-replication": "yes",
                                      "masterauth": data.redis.password, **extra})
            replicas.append(replica.start())
        sentinel_password = data.redis.password + "-sentinels"
        sentinels = [start_sentinel(base, net, host, primary=d.back,
                                    password=data.redis.password,
                                    sentinel_password=sentinel_password, certs=certs)
                     for host in ("data", "data2", "hostC")]
        fronts = ",".join(h.front or "" for h in net.hosts.values() if h.front)
        env = {"REDIS_SENTINELS": ",".join(f"{net.hosts[h].back}:{SENTINEL_PORT}"
                                           for h in ("data", "data2", "hostC")),
               "REDIS_SENTINEL_MASTER": MASTER_NAME, "REDIS_PASSWORD": data.redis.password,
               "REDIS_SENTINEL_PASSWORD": sentinel_password, "DJANGO_ALLOWED_HOSTS": fronts,
               "REDIS_TLS": "true"}
        hosts = {name: app_host(data, base, name=name, address=net.hosts[name].back,
                                netns=net.hosts[name].netns, front=net.hosts[name].front,
                                **FAST, **BEAT_ENV, **env)
                 for name in ("hostB", "hostC")}
    except BaseException:
        net.close()
        raise
    cluster = Group(net=net, data=data, replicas=replicas, sentinels=sentinels, hosts=hosts,
                    sentinel_password=sentinel_password, certs=certs)
    try:
        yield cluster
    except BaseException:
        print("\n".join(h.logs() for h in hosts.values()))
        raise
    finally:
        cluster.stop()


def test_the_primarys_host_split_off_with_an_app_host_loses_no_acknowledged_document(
        group: Group, request: pytest.FixtureRequest, measure) -> None:
    setting = request.node.callspec.params["group"]
    d = group.net.hosts["data"]
    for replica in group.replicas:
        wait_until(lambda r=replica: r.client().info("replication")["master_link_status"]
                   == "up", timeout=30, what="the replicas follow the primary")
    b, c = group.hosts["hostB"], group.hosts["hostC"]
    webs: dict[str, Web] = {"hostB": b.start_web(workers=1), "hostC": c.start_web(workers=1)}
    workers = {"hostB": b.start_worker(), "hostC": c.start_worker()}
    beats = {"hostC": c.start_beat(), "hostB": b.start_beat()}
    for name, worker in workers.items():
        group.hosts[name].wait_worker(worker, group.data.redis.client())
    sessions = {name: host.wait_web(webs[name]).session()
                for name, host in (("hostB", b), ("hostC", c))}
    history = History()
    acked: list[int] = []
    answers: dict[str, list[tuple[float, int]]] = {"hostB": [], "hostC": []}

    def submit(i: int, host: str) -> None:
        began = time.time()
        try:
            response = sessions[host].post("/api/documents/", json={
                "title": f"split {i}", "text": sample_text(i)})
            status = response.status_code
        except requests.RequestException:
            status = 0
        answers[host].append((began, status))
        if status == 202:
            doc = int(response.json()["id"])
            acked.append(doc)
            history.add("acked", doc, host=host)
        else:
            history.add("refused", f"request {i}", host=host)

    for i in range(4):
        submit(i, ("hostB", "hostC")[i % 2])
    promoted: list[float] = []
    stop = threading.Event()

    def watch() -> None:
        # Beside the clients, whose requests may each wait seconds on the split.
        while not stop.is_set() and not promoted:
            if group.primary() not in (None, d.back):
                promoted.append(time.time())
            stop.wait(0.1)

    # The hosts' supervisor: a beat that lost its lease exits by design (its writes refused,
    # or its lease run out), and a worker whose Redis answers NOREPLICAS to its BRPOP exits
    # (kombu takes the error for a bug, not a lost connection); each is started again.
    exited: list[str] = []
    procs = {("hostB", "beat"): beats["hostB"], ("hostC", "beat"): beats["hostC"],
             **{(name, "worker"): worker for name, worker in workers.items()}}

    def supervise() -> None:
        while not supervising.is_set():
            for (name, kind), proc in list(procs.items()):
                if not proc.alive():
                    exited.append(f"{name} {kind} +{time.time() - split_at:.1f} s")
                    again = f"{kind}1-again{len(exited)}"
                    host = group.hosts[name]
                    procs[(name, kind)] = (host.start_beat(again) if kind == "beat"
                                           else host.start_worker(again))
            supervising.wait(0.5)

    supervising = threading.Event()
    group.net.split(OLD_SIDE)
    split_at = time.time()
    threading.Thread(target=supervise, daemon=True, name="supervisor").start()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    i = 4
    while time.time() < split_at + SPLIT_S:
        for host in ("hostB", "hostC"):
            threading.Thread(target=submit, args=(i, host), daemon=True).start()
            i += 1
        time.sleep(SUBMIT_EVERY_S)  # the clients' pace, not a wait for a condition
    stop.set()
    watcher.join(timeout=5)
    assert promoted, "no replica was promoted during the split"
    # What the old primary holds as the split heals: its resync as a replica discards it.
    held = dict(line.rsplit("=", 1) for line in
                group.old_primary("EVAL", HOLDINGS, "0").splitlines() if "=" in line)
    old_journal = parse_journal(group.old_primary("LRANGE", JOURNAL_KEY, "0", "-1").splitlines())
    group.net.join(OLD_SIDE)
    healed_at = time.time()
    wait_until(lambda: all(not t.is_alive() for t in threading.enumerate()
                           if t.name.startswith("Thread-") and t is not watcher),
               timeout=60, what="the split's requests answered")
    old = group.data.redis.client()
    wait_until(lambda: old.info("replication")["role"] == "slave", timeout=60,
               interval=0.5, what="the old primary rejoins as a replica")
    rejoined_s = time.time() - healed_at
    for j in range(i, i + 4):
        submit(j, ("hostB", "hostC")[j % 2])
    try:
        wait_until(lambda: finished(group.data, acked), timeout=120, interval=0.5,
                   what="every acknowledged document done")
    except TimeoutError:
        marks = ",".join("?" * len(acked))
        print(group.data.query(f"SELECT id, state, generation, starts FROM documents_document "
                               f"WHERE state NOT IN ('done', 'failed') AND id IN ({marks})",
                               *acked))
        raise
    done_s = time.time() - healed_at
    supervising.set()
    documents_history(group.data, history, acked)
    # Both sides' journals: the old primary's (read before its resync discarded it) and the
    # new one's. A beat on each side may lead at once; the effects of a slot stay once only
    # because its run is recorded in PostgreSQL under the slot's key (slots_history).
    new_journal = parse_journal(group.primary_client().lrange(JOURNAL_KEY, 0, -1))
    seen = {(e.token, e.kind, e.detail, e.at) for e in new_journal}
    journal = new_journal + [e for e in old_journal if (e.token, e.kind, e.detail, e.at)
                             not in seen]
    journal.sort(key=lambda e: e.at)
    journal_history(journal, history, jobs=list(EVERY))
    slots_history(group.data, history, jobs=list(EVERY))
    verdict = check(history)
    old_side = [e for e in old_journal if e.at >= split_at and e not in new_journal]
    kept = {row[0] for row in group.data.query(
        "SELECT id FROM documents_document WHERE title LIKE 'split %'")}

    def during(host: str) -> dict[str, int]:
        statuses = [status for began, status in answers[host]
                    if split_at <= began < split_at + SPLIT_S]
        return {str(s): statuses.count(s) for s in sorted(set(statuses))}

    last_b_202 = max((began - split_at for began, status in answers["hostB"]
                      if status == 202 and split_at <= began < split_at + SPLIT_S), default=None)
    recovered = group.data.query(
        "SELECT COUNT(DISTINCT document_id) FROM documents_documentrun WHERE worker LIKE ? "
        "AND document_id IN (" + ",".join("?" * len(acked)) + ")", "%hostC%", *acked)
    measure(setting=setting, split_s=SPLIT_S, promoted_after_s=round(promoted[0] - split_at, 1),
            answers_during_hostB=during("hostB"), answers_during_hostC=during("hostC"),
            hostB_last_202_after_split_s=None if last_b_202 is None else round(last_b_202, 1),
            old_primary_held_at_heal=held, old_primary_replica_after_heal_s=round(rejoined_s, 1),
            all_done_after_heal_s=round(done_s, 1), runs_on_hostC=recovered[0][0],
            restarted=exited,
            old_side_elected=sorted({host_of(e.token) for e in old_side if e.kind == "elected"}),
            old_side_fired=sum(1 for e in old_side if e.kind == "fired"),
            **verdict.counts())
    # Documents: every 202 kept and done once, nothing refused kept; slots: each one's work
    # ran once. Two leaders at once, one per side, is what Sentinel allows (measured above).
    assert not (verdict.lost or verdict.stuck or verdict.doubled or verdict.effects_twice
                or verdict.ack_not_kept or verdict.refused_but_kept), verdict.counts()
    assert kept == set(acked), (sorted(kept - set(acked)), sorted(set(acked) - kept))
    assert d.back != group.primary()
    if setting != "as shipped":
        # The old primary refuses writes past the lag: hostB answers 202 no later than that.
        assert last_b_202 is None or last_b_202 < 10 + 5, last_b_202
