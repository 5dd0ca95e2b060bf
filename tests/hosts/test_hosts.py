"""Three hosts on one machine, each on its own loopback address, data directory and name:
the data host (Redis and PostgreSQL on 127.0.0.2 only, with passwords), hostB (127.0.0.3: web,
beat; its worker joins later) and hostC (127.0.0.4: web, a worker, two beats).

Work submitted on one host's web workers is processed by another host's worker; events reach
pages on both hosts; one beat leads across all three beats and one other takes over when it is
SIGKILLed; the reconciler running on hostB leaves alone a document running on hostC.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.documents.broker import document_of
from tests.documents.tally import all_finished, sample_text, tally
from tests.hosts.cluster import app_host
from tests.hosts.conftest import FAST, Cluster
from tests.notifications.conftest import cookie_of
from tests.notifications.sse import SSEClient
from tests.procs import Proc, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.past_one_box]

LOCK_KEY = "platform:beat::lock"
ELECTED = "beat: elected leader"
FIRED = re.compile(r"beat: fired (\S+) slot=(\S+) by=(\S+)")
RECONCILED = re.compile(r"re-enqueued (\d+) document")
DOCS = 6


@pytest.fixture(scope="module")
def started(cluster: Cluster) -> Iterator[Cluster]:
    """hostB: web (2 workers) and a beat; hostC: web, worker1 and two beats. Started together
    so their start-up costs overlap."""
    b, c = cluster.b, cluster.c
    cluster.web_b = b.start_web(workers=2)  # type: ignore[attr-defined]
    cluster.web_c = c.start_web(workers=1)  # type: ignore[attr-defined]
    cluster.worker_c = c.start_worker("worker1")  # type: ignore[attr-defined]
    cluster.beats = {  # type: ignore[attr-defined]
        "beat1.hostB": b.start_beat("beat1"),
        "beat1.hostC": c.start_beat("beat1"),
        "beat2.hostC": c.start_beat("beat2"),
    }
    client = cluster.data.redis.client()
    c.wait_worker(cluster.worker_c, client)  # type: ignore[attr-defined]
    b.wait_web(cluster.web_b, workers=2)  # type: ignore[attr-defined]
    c.wait_web(cluster.web_c)  # type: ignore[attr-defined]
    yield cluster


@pytest.fixture(autouse=True)
def logs_on_failure(request: pytest.FixtureRequest, cluster: Cluster) -> Iterator[None]:
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(cluster.logs())


def runs(cluster: Cluster, ids: list[int]) -> list[tuple[int, str, str]]:
    marks = ",".join("?" * len(ids))
    return [(r[0], r[1], r[2]) for r in cluster.data.query(
        f"SELECT document_id, worker, outcome FROM documents_documentrun "
        f"WHERE document_id IN ({marks}) ORDER BY id", *ids)]


def test_work_submitted_on_one_host_runs_on_another_and_events_reach_both(started, measure):
    cluster = started
    on_b = cluster.web_b.session()
    # A page open on each host (two on hostB, whose kernel may hand them to either worker).
    pages = [SSEClient(cluster.web_b.base, cookie_of(on_b), name=f"b{i}").start()
             for i in range(2)]
    on_c = cluster.web_c.session()
    pages.append(SSEClient(cluster.web_c.base, cookie_of(on_c), name="c").start())
    for page in pages:
        assert page.ready.wait(30), f"page {page.name} never attached"

    ids = [on_b.submit(sample_text(i), title=f"from hostB {i}") for i in range(DOCS)]
    wait_until(lambda: all_finished(cluster.data, ids), timeout=60, interval=0.2,
               what="hostC's worker finishes what hostB accepted")
    result = tally(cluster.data, ids)
    assert result.completed == DOCS and result.doubled == 0 and result.lost == 0
    # Every run is recorded by the node that ran it: hostC's worker, not hostB (no worker).
    nodes = Counter(worker for _, worker, outcome in runs(cluster, ids) if outcome == "done")
    assert nodes == {"worker1@hostC": DOCS}, nodes

    def done_seen(page: SSEClient) -> set[int]:
        return {e.data.get("id") for e in page.of_kind("document.state")
                if e.data.get("state") == "done"} & set(ids)

    wait_until(lambda: all(done_seen(p) == set(ids) for p in pages), timeout=30,
               what="every page on both hosts hears every document finish")
    per_page = {p.name: len(done_seen(p)) for p in pages}
    for page in pages:
        page.stop()
    measure(submitted_on_hostB=DOCS, done_by_hostC=nodes["worker1@hostC"],
            done_events_per_page=per_page)


def leader(cluster: Cluster) -> str | None:
    return cluster.data.redis.client().get(LOCK_KEY)


def elections(procs: dict[str, Proc]) -> dict[str, int]:
    return {name: proc.log().count(ELECTED) for name, proc in procs.items()}


def beat_of(token: str) -> str:
    return token.split("@", 1)[0]


def test_one_beat_leads_across_hosts_and_one_other_takes_over_after_a_sigkill(started,
                                                                            measure):
    cluster = started
    # hostB's worker starts now, beside this test's waits; the reconciler test needs it.
    cluster.worker_b = cluster.b.start_worker("worker1")  # type: ignore[attr-defined]
    beats: dict[str, Proc] = cluster.beats
    first = wait_until(lambda: leader(cluster), timeout=60, what="a beat leads")
    # Several reconciler slots (every 2 s) fired under the first leader.
    wait_until(lambda: sum(len(FIRED.findall(p.log())) for p in beats.values()) >= 3,
               timeout=30, what="the leader fires slots")
    counts = elections(beats)
    assert sum(counts.values()) == 1 and counts[beat_of(first)] == 1, counts

    killed = beats[beat_of(first)]
    killed.signal(signal.SIGKILL, group=True)
    killed.wait_exit(timeout=10)
    killed_at = time.monotonic()
    second = wait_until(lambda: (t := leader(cluster)) and t != first and t, timeout=30,
                        what="another beat leads")
    handover_s = time.monotonic() - killed_at
    fired_before = sum(len(FIRED.findall(p.log())) for p in beats.values())
    wait_until(lambda: sum(len(FIRED.findall(p.log())) for p in beats.values())
               >= fired_before + 2, timeout=30, what="the new leader fires slots")
    counts = elections(beats)
    survivors = {name: n for name, n in counts.items() if beats[name] is not killed}
    # Exactly one of the two survivors took over, once; the other still waits.
    assert sorted(survivors.values()) == [0, 1], counts
    assert beat_of(second) in survivors and survivors[beat_of(second)] == 1
    # No slot fired twice across the three beats (each fire names its slot).
    fired = Counter((job, slot) for p in beats.values() for job, slot, _ in FIRED.findall(p.log()))
    assert fired and max(fired.values()) == 1, [k for k, n in fired.items() if n > 1]
    measure(beats=3, hosts=2, leaders_before=1, leaders_after=1,
            handover_s=round(handover_s, 2), slots_fired=len(fired), slots_fired_twice=0)


def drop_lease(cluster: Cluster, doc_id: int) -> int:
    """Delete the document's in-flight entry: only the live-run check protects it now."""
    client = cluster.data.redis.client()
    tags = [tag for tag, entry in client.hgetall("unacked").items()
            if document_of(json.dumps(json.loads(entry)[0])) == doc_id]
    for tag in tags:
        client.pipeline().hdel("unacked", tag).zrem("unacked_index", tag).execute()
    return len(tags)


def reconciler_passes(cluster: Cluster, since_id: int) -> list[tuple[int, str]]:
    """(re-enqueued, node that ran the pass) for each reconciler pass after ``since_id``."""
    rows = cluster.data.query(
        "SELECT detail, worker FROM reports_jobrun WHERE job = 'platform.reconcile' "
        "AND outcome = 'done' AND id > ? ORDER BY id", since_id)
    return [(int(m.group(1)), r[1]) for r in rows if (m := RECONCILED.search(r[0]))]


def test_the_reconciler_on_one_host_leaves_a_document_running_on_another(started, measure):
    cluster = started
    nodes = {"worker1@hostB", "worker1@hostC"}
    # hostB's worker (started beside the beat test) and hostC's, one pool process each.
    worker_b = getattr(cluster, "worker_b", None) or cluster.b.start_worker("worker1")
    cluster.b.wait_worker(worker_b, cluster.data.redis.client())
    client = cluster.web_c.session()
    # Long enough for several reconciler passes (every 2 s, documents untouched for 3 s).
    doc = client.submit("#!canary:work-seconds=12\n" + sample_text(99), title="long")
    running = wait_until(lambda: [r[1] for r in runs(cluster, [doc]) if r[2] == "running"],
                         timeout=30, what="a worker runs the long document")
    runner = running[0]
    (other,) = nodes - {runner}
    # No message anywhere for it now: only the live-run check protects it. A reconciler that
    # judged the runner's pid on its own host (or by the other host's worker of the same
    # short name) would re-enqueue it.
    assert drop_lease(cluster, doc) == 1
    last = cluster.data.query("SELECT COALESCE(MAX(id), 0) FROM reports_jobrun")[0][0]

    def looked_at_it() -> list[tuple[int, str]]:
        # The runner's one pool process is busy: every pass now runs on the other host
        # (and the leading beat's recovery looks every second, wherever it leads).
        passes = reconciler_passes(cluster, last)
        return passes if len(passes) >= 2 else []

    passes = wait_until(looked_at_it, timeout=40, interval=0.5,
                        what="two reconciler passes while the document runs")
    assert runs(cluster, [doc])[-1][2] == "running", "finished before two passes: not tested"
    wait_until(lambda: all_finished(cluster.data, [doc]), timeout=40, interval=0.5,
               what="the long document finishes")
    assert {node for _, node in passes} == {other}, passes
    assert [r[1:] for r in runs(cluster, [doc])] == [(runner, "done")]
    assert sum(n for n, _ in passes) == 0, passes
    beats: dict[str, Proc] = cluster.beats  # type: ignore[attr-defined]
    assert not any("re-enqueued" in p.log() for p in beats.values())
    result = tally(cluster.data, [doc])
    assert result.completed == 1 and result.doubled == 0 and result.extra_starts == 0
    measure(reconciler_passes_seeing_it=len(passes), re_enqueued=0, runs=1,
            ran_on=runner, reconciled_on=other)


def test_a_second_worker_under_a_taken_name_stops_itself(started, tmp_path, measure):
    """Two hosts cloned with one host name: their workers share a node name, and so a
    heartbeat key. The newer one must stop, or the reconciler would read one's pool pids
    as the other's and re-enqueue documents that are still running."""
    cluster = started
    first = app_host(cluster.data, tmp_path, name="clone", address="127.0.0.3", **FAST)
    second = app_host(cluster.data, tmp_path / "second", name="clone", address="127.0.0.4",
                      **FAST)
    client = cluster.data.redis.client()
    try:
        elder = first.start_worker("worker1")
        first.wait_worker(elder, client)
        newer = second.start_worker("worker1")
        started_at = time.monotonic()
        wait_until(lambda: not newer.alive(), timeout=60, what="the newer worker stops")
        stopped_after = time.monotonic() - started_at
        assert "another worker named worker1@clone is alive" in newer.log()
        assert elder.alive() and "a newer worker named worker1@clone" in elder.log()
        # The elder goes on: its heartbeat is its own again.
        wait_until(lambda: json.loads(client.get("platform:worker:worker1@clone"))["pid"]
                   == elder.pid, timeout=10, what="the elder's heartbeat")
        measure(same_name_workers=2, stopped=1, stopped_after_s=round(stopped_after, 1))
    finally:
        first.stop()
        second.stop()
