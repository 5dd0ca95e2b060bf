"""Where the ceiling is: the cost of one document in each component, and what limits first.

    .venv/bin/python loadtests/ceiling.py [--docs 200] [--workers 1,2,4] [--db sqlite,postgres]
        [--repeats 2] [--clients 16] [--in-flight 64] [--client lean|requests] [--before DIR]

The document path as shipped: logged-in clients POST /api/documents/ to uvicorn (2 web
worker processes), the web worker writes the row and enqueues the task (202), a Celery worker
process (prefork -c 1, the durable policy) processes it with DOCUMENTS_PROCESSING_SECONDS=0
(so what shows is the platform's own overhead, not the simulated work), and the row is done.

For each database and each count of Celery worker processes, one fresh Stack and three phases:

1. queue: the Celery workers are SIGSTOPped; --docs documents are submitted by 4 clients.
   Per document: web CPU (uvicorn's processes, /proc), Redis CPU (INFO cpu), Redis commands
   (INFO commandstats), Redis memory per queued document (INFO memory), the database's share;
   and the 202 latency.
2. drain: the workers are SIGCONTed and process the queue alone. Per document: Celery CPU
   (main processes and pool children), Redis, database.
3. end to end: --docs more documents submitted by --clients clients (16) while the workers
   run; documents done per second from the first submit to the last done, and how busy each
   component was. Enough clients to keep the box busy: each waits for its 202 before sending
   again, so a few clients measure their own round trips, not the box (with 4, documents/s
   equalled the clients' submit rate whenever 2 or more worker processes ran, and fell as the
   workers' CPU slowed the web's answers; docs/benchmarks.md).

The clients run in this process, on the same cores, and their CPU is measured too
(``harness_cpu_ms``): what they take is not there for the platform. --client lean (the
default) sends each submit on a kept-alive ``http.client`` connection
(loadtests/lean_client.py); --client requests uses the tests' requests-based client, as every
run before 2026-12-05 17:50 did (1.2 ms of CPU per document against 0.5-0.6, the meters
included). --in-flight bounds the end-to-end phase's backlog (Gate, below; ADR 27's second
amendment); 0 leaves it unbounded, as every run before then did.

Database cost: on SQLite, the time the single write lock is held (a probe samples it, see
loadtests/costs.py) per document: that lock is one per file, whatever the cores. On
PostgreSQL, the CPU of the postmaster and its backends (/proc), transactions committed and WAL
bytes (pg_stat_database, pg_current_wal_lsn) per document.

From those: docs/s per core of each component (1 / CPU seconds per document), and the
components that cannot grow by adding cores (Redis runs commands on one thread; SQLite has one
writer): their rate is the installation's ceiling. Writes loadtests/results/ceiling.{json,png}.

--before DIR names another checkout of the platform (the code before a change, e.g. from
``git archive``): every run is made twice, once with the processes started from DIR and once
from this checkout, back to back, so both meet the same load from other work on the machine.
Measured on a 2-core machine, its load averages stored with the results: the per-document
costs travel, the absolute throughput does not.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tests.procs  # noqa: E402
from celery_conf.names import Queue  # noqa: E402
from celery_conf.policy import queue_lists  # noqa: E402
from loadtests.common import (  # noqa: E402
    load_note,
    new_figure,
    progress,
    save_figure,
    save_json,
    summary,
)
from loadtests.costs import (  # noqa: E402
    POSTGRES_SNAPSHOT_STATEMENTS,
    WriterProbe,
    postgres_counters,
    redis_counters,
    redis_delta,
    tree_cpu,
    writer_delta,
)
from loadtests.lean_client import LeanClient  # noqa: E402
from tests.procs import Client, Proc, Stack, Web, make_template_db, wait_until  # noqa: E402

# The documents queue's lists, one per priority step (celery_conf/policy.py).
DOCUMENTS_LISTS = queue_lists(str(Queue.DOCUMENTS))
SUBMITTERS = 4  # concurrent logged-in clients, as in throughput_comparison.py
# End to end: clients enough that the submitting side is not the limit on this box (a closed
# loop of 4 was: it measured the 202's round trip, not the documents' rate).
E2E_CLIENTS = 16
# End to end: documents submitted and not yet finished at most (Gate); 0, unbounded.
IN_FLIGHT = 64
WEB_WORKERS = 2  # uvicorn worker processes, as shipped (platform/lib.sh WEB_WORKERS)
# uvicorn's HTTP parser as every shipped unit starts it (ADR 20: h11 caps headers); without
# it uvicorn picks httptools, 20-30 % cheaper per request, which no customer box runs.
WEB_ARGS = ("--http", "h11", "--h11-max-incomplete-event-size", "65536")
WARM_UP_DOCS = 12  # before measuring: every web and pool process has served a few
FINISHED_SQL = "SELECT COUNT(*) AS n FROM documents_document WHERE state IN ('done', 'failed')"
ENV = {
    "DOCUMENTS_PROCESSING_SECONDS": "0",
    "METERING_DAILY_LIMIT": "100000000",
}


class Database:
    """The database side of one Stack and its cost counters, SQLite or PostgreSQL.

    On PostgreSQL the benchmark polls through one connection kept open (a connection per
    poll would fork a backend each time and be counted as the platform's cost); that
    backend's CPU is left out and its own transactions are subtracted.
    """

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.probe: WriterProbe | None = None
        self.pg: Any = None
        self.own_statements = 0
        self.lock = threading.Lock()  # finished() is also called from the Gate's thread
        if stack.engine == "sqlite":
            self.probe = WriterProbe(stack.db_path)
            self.probe.start()
            # Kept open: the Gate asks every few milliseconds (reads never take the writer).
            self.reader = sqlite3.connect(stack.db_path, timeout=20, check_same_thread=False)
        else:
            self.server = stack.postgres.server
            self.pg = self.server.connect(stack.db_name, autocommit=True)
            self.own_pid = self.pg.info.backend_pid

    def finished(self) -> int:
        with self.lock:
            if self.pg is None:
                return int(self.reader.execute(FINISHED_SQL).fetchone()[0])
            self.own_statements += 1
            return int(self.pg.execute(FINISHED_SQL).fetchone()[0])

    def counters(self) -> dict[str, float]:
        if self.probe is not None:
            return {**self.probe.counters(), "at": time.monotonic()}
        counters = postgres_counters(self.pg, self.stack.db_name)
        self.own_statements += POSTGRES_SNAPSHOT_STATEMENTS
        return {**counters, "own": float(self.own_statements),
                "cpu_s": tree_cpu([self.server.proc.pid], exclude=frozenset({self.own_pid}))}

    def delta(self, before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        if self.probe is not None:
            return writer_delta(before, after, after["at"] - before["at"])
        return {"cpu_s": after["cpu_s"] - before["cpu_s"],
                "commits": after["commits"] - before["commits"] - (after["own"] - before["own"]),
                "sessions": after["sessions"] - before["sessions"],
                "wal_bytes": after["wal_bytes"] - before["wal_bytes"]}

    def close(self) -> None:
        if self.probe is not None:
            self.probe.stop()
            self.reader.close()
        if self.pg is not None:
            self.pg.close()


def new_stack(work: Path, template: Path, pg: Any, engine: str, name: str) -> Stack:
    return Stack(base_dir=work / name, template_db=template, env_overrides=ENV,
                 postgres=pg if engine == "postgres" else None)


class Snapshot:
    """Every component's counters at one instant."""

    def __init__(self, stack: Stack, db: Database, web: Web, workers: list[Proc]) -> None:
        self.at = time.monotonic()
        self.web = tree_cpu([web.proc.pid])
        self.workers = tree_cpu([w.pid for w in workers])
        self.redis = redis_counters(stack.redis.client())
        self.db = db.counters()
        own = psutil.Process().cpu_times()  # the benchmark's clients share the machine
        self.clients = own.user + own.system

    def cost(self, before: Snapshot, db: Database, docs: int) -> dict[str, float]:
        """Per-document costs between ``before`` and this snapshot."""
        seconds = self.at - before.at
        red = redis_delta(before.redis, self.redis)
        out = {
            "docs": docs, "seconds": seconds,
            "web_cpu_ms": 1000 * (self.web - before.web) / docs,
            "worker_cpu_ms": 1000 * (self.workers - before.workers) / docs,
            "redis_cpu_ms": 1000 * red["cpu_s"] / docs,
            "redis_commands": red["commands"] / docs,
            "redis_memory_bytes": red["memory_bytes"] / docs,
            # How many cores each component kept busy over the phase.
            "web_cores": (self.web - before.web) / seconds,
            "worker_cores": (self.workers - before.workers) / seconds,
            "redis_cores": red["cpu_s"] / seconds,
            "client_cores": (self.clients - before.clients) / seconds,
        }
        d = db.delta(before.db, self.db)
        if "writer_busy_s" in d:
            out["db_writer_ms"] = 1000 * d["writer_busy_s"] / docs
            out["db_writer_busy"] = d["writer_busy_fraction"]
        else:
            out["db_cpu_ms"] = 1000 * d["cpu_s"] / docs
            out["db_cores"] = d["cpu_s"] / seconds
            out["db_commits"] = d["commits"] / docs
            out["db_sessions"] = d["sessions"] / docs
            out["db_wal_bytes"] = d["wal_bytes"] / docs
        return out


class Gate(threading.Thread):
    """At most ``cap`` documents submitted and not yet finished: a client waits for a slot.

    Unbounded, 16 closed-loop clients keep the web answering faster than the workers finish
    (the web's CPU is taken from the workers on a shared box): a backlog builds, and after the
    last 202 the workers drain it alone with the web idle, so the phase measured a mix of two
    regimes. With the backlog bounded the web submits only as fast as documents finish, as on
    a box that sustains its load, and the rate is the box's. ``samples`` (time, finished) give
    the steady rate between 10 % and 90 % of the phase's documents.
    """

    INTERVAL_S = 0.005

    def __init__(self, db: Database, cap: int, start_count: int) -> None:
        super().__init__(daemon=True)
        self.db, self.start_count = db, start_count
        self.slots = threading.Semaphore(cap)
        self.samples: list[tuple[float, int]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        seen = 0
        while not self.stopped.wait(self.INTERVAL_S):
            done = self.db.finished() - self.start_count
            self.samples.append((time.monotonic(), done))
            for _ in range(done - seen):
                self.slots.release()
            seen = max(seen, done)

    def acquire(self) -> None:
        if not self.slots.acquire(timeout=120):
            raise TimeoutError("no document finished in 120 s")

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=5)

    def steady_rate(self, docs: int) -> float:
        """Documents finished per second from the 10 % to the 90 % point of ``docs`` (NaN if
        the samples do not span them: too few documents for the interval)."""
        low = next(((t, n) for t, n in self.samples if n >= docs * 0.1), None)
        high = next(((t, n) for t, n in self.samples if n >= docs * 0.9), None)
        if low is None or high is None or high[0] <= low[0]:
            return float("nan")
        return (high[1] - low[1]) / (high[0] - low[0])


CLIENT_KINDS = {"lean": LeanClient.login, "requests": Client.login}


def submit_all(clients: list[Any], docs: int, tag: str,
               gate: Gate | None = None) -> tuple[list[float], float, float]:
    """``docs`` documents from every client at once, each through ``gate`` when given;
    (202 latencies, first send, last 202)."""
    latencies: list[float] = []
    per_client = [docs // len(clients) + (i < docs % len(clients)) for i in range(len(clients))]
    errors: list[BaseException] = []

    def run(client: Client, count: int) -> None:
        try:
            for i in range(count):
                if gate is not None:
                    gate.acquire()
                started = time.perf_counter()
                client.submit(f"{tag} document {i} " * 20, title=f"{tag} {i}")
                latencies.append(time.perf_counter() - started)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(c, n))
               for c, n in zip(clients, per_client, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return latencies, started, time.monotonic()


def queued_bytes(stack: Stack) -> float:
    """Redis memory per message waiting in the documents queue (``MEMORY USAGE`` of the list).

    Read from the key itself rather than INFO's used_memory, which moves by kilobytes with
    client buffers.
    """
    client = stack.redis.client()
    length = sum(client.llen(key) for key in DOCUMENTS_LISTS)
    if not length:
        return float("nan")
    return sum(float(client.memory_usage(key, samples=0) or 0)
               for key in DOCUMENTS_LISTS) / length


def wait_finished(db: Database, total: int, what: str) -> float:
    wait_until(lambda: db.finished() >= total, timeout=600, interval=0.02, what=what)
    return time.monotonic()


def run_one(work: Path, template: Path, pg: Any, engine: str, workers: int,
            docs: int, tag: str = "", e2e_clients: int = E2E_CLIENTS,
            client_kind: str = "lean", in_flight: int = IN_FLIGHT) -> dict[str, Any]:
    name = f"{engine}-w{workers}"
    run_dir = f"{name}{tag}"  # a fresh directory: no database file of an earlier run
    stack = new_stack(work, template, pg, engine, run_dir)
    db: Database | None = None
    try:
        procs = [stack.start_worker(f"c{i}", concurrency=1) for i in range(1, workers + 1)]
        web = stack.start_web(workers=WEB_WORKERS, uvicorn_args=WEB_ARGS)
        login = CLIENT_KINDS[client_kind]
        clients = [login(web.base, "tester", "tester-password-1")
                   for _ in range(max(SUBMITTERS, e2e_clients))]
        db = Database(stack)
        expected = db.finished() + max(WARM_UP_DOCS, len(clients))
        submit_all(clients, max(WARM_UP_DOCS, len(clients)), "warm-up")
        wait_finished(db, expected, "warm-up documents done")

        # 1. queue: nothing consumes, so the web, Redis and database costs are the submit's.
        for p in procs:
            p.signal(signal.SIGSTOP, group=True)
        before = Snapshot(stack, db, web, procs)
        latencies, _, _ = submit_all(clients[:SUBMITTERS], docs, "queued")
        time.sleep(1.0)  # PostgreSQL publishes a backend's counters when it ends: let them land
        queued = Snapshot(stack, db, web, procs)
        queue_cost = queued.cost(before, db, docs)
        queue_cost["latency_ms"] = {k: v * 1000 if k != "n" else v
                                    for k, v in summary(latencies).items()}
        queue_cost["redis_bytes_per_queued"] = queued_bytes(stack)
        progress(f"{name}: queue  web {queue_cost['web_cpu_ms']:.1f} ms/doc, "
                 f"redis {queue_cost['redis_cpu_ms']:.2f} ms/doc "
                 f"{queue_cost['redis_commands']:.1f} cmds/doc "
                 f"{queue_cost['redis_bytes_per_queued']:.0f} B/queued doc, "
                 f"202 p50 {queue_cost['latency_ms']['p50']:.0f} ms")

        # 2. drain: the workers alone.
        for p in procs:
            p.signal(signal.SIGCONT, group=True)
        expected += docs
        resumed = time.monotonic()
        emptied = wait_finished(db, expected, "queued documents drained")
        time.sleep(1.0)
        drained = Snapshot(stack, db, web, procs)
        drain_cost = drained.cost(queued, db, docs)
        drain_cost["docs_per_s"] = docs / (emptied - resumed)
        progress(f"{name}: drain  worker {drain_cost['worker_cpu_ms']:.1f} ms/doc, "
                 f"redis {drain_cost['redis_cpu_ms']:.2f} ms/doc "
                 f"{drain_cost['redis_commands']:.1f} cmds/doc, "
                 f"{drain_cost['docs_per_s']:.1f} docs/s")

        # 3. end to end: submit and process at once.
        start = Snapshot(stack, db, web, procs)
        harness_from = harness_cpu()
        gate = Gate(db, in_flight, expected) if in_flight else None
        if gate is not None:
            gate.start()
        try:
            latencies, first, last_202 = submit_all(clients[:e2e_clients], docs, "e2e", gate)
            expected += docs
            done = wait_finished(db, expected, "end-to-end documents done")
        finally:
            if gate is not None:
                gate.stop()
        end = Snapshot(stack, db, web, procs)
        e2e = end.cost(start, db, docs)
        e2e["docs_per_s"] = docs / (done - first)
        e2e["in_flight"] = in_flight
        if gate is not None:
            e2e["steady_docs_per_s"] = gate.steady_rate(docs)
        # The clients and meters share the box's two cores with the platform: what they take
        # is not there for it (the ceiling's arithmetic, docs/benchmarks.md).
        e2e["harness_cpu_ms"] = 1000 * (harness_cpu() - harness_from) / docs
        e2e["harness_cores"] = e2e["harness_cpu_ms"] * e2e["docs_per_s"] / 1000
        e2e["submit_per_s"] = docs / (last_202 - first)
        e2e["clients"] = e2e_clients
        e2e["client_kind"] = client_kind
        e2e["latency_ms"] = {k: v * 1000 if k != "n" else v
                             for k, v in summary(latencies).items()}
        progress(f"{name}: e2e    {e2e['docs_per_s']:.1f} docs/s"
                 + (f" (steady {e2e['steady_docs_per_s']:.1f})" if gate is not None else "")
                 + f", cores busy: web "
                 f"{e2e['web_cores']:.2f}, workers {e2e['worker_cores']:.2f}, redis "
                 f"{e2e['redis_cores']:.2f}, clients and meters {e2e['harness_cores']:.2f}"
                 + (f", sqlite writer {e2e['db_writer_busy']:.0%}" if "db_writer_busy" in e2e
                    else f", postgres {e2e.get('db_cores', 0):.2f}"))
        failed = stack.query("SELECT COUNT(*) AS n FROM documents_document "
                             "WHERE state = 'failed'")[0]["n"]
        return {"engine": engine, "workers": workers, "queue": queue_cost,
                "drain": drain_cost, "e2e": e2e, "failed": failed}
    finally:
        if db is not None:
            db.close()
        stack.stop()


def harness_cpu() -> float:
    """CPU seconds of this process so far: the submitting clients and the meters' threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def code_at(root: Path) -> Any:
    """Start the Stack's processes from the checkout at ``root`` (tests/procs.py's cwd)."""
    saved = tests.procs.ROOT
    tests.procs.ROOT = root
    try:
        yield
    finally:
        tests.procs.ROOT = saved


def per_core(rows: list[dict[str, Any]], engine: str, code: str = "now") -> dict[str, Any]:
    """Median per-document costs of one engine over its runs, and the rates they allow."""
    mine = [r for r in rows if r["engine"] == engine and r.get("code", "now") == code]
    med = lambda phase, key: statistics.median(r[phase][key] for r in mine)  # noqa: E731
    costs = {
        "web_cpu_ms": med("queue", "web_cpu_ms"),
        "worker_cpu_ms": med("drain", "worker_cpu_ms"),
        "redis_cpu_ms": med("queue", "redis_cpu_ms") + med("drain", "redis_cpu_ms"),
        "redis_commands": med("queue", "redis_commands") + med("drain", "redis_commands"),
        "redis_bytes_per_queued": med("queue", "redis_bytes_per_queued"),
    }
    if engine == "sqlite":
        costs["db_writer_ms"] = med("queue", "db_writer_ms") + med("drain", "db_writer_ms")
    else:
        costs["db_cpu_ms"] = med("queue", "db_cpu_ms") + med("drain", "db_cpu_ms")
        costs["db_commits"] = med("queue", "db_commits") + med("drain", "db_commits")
        costs["db_sessions"] = med("queue", "db_sessions") + med("drain", "db_sessions")
        costs["db_wal_bytes"] = med("queue", "db_wal_bytes") + med("drain", "db_wal_bytes")
    rates = {
        # A -c 1 worker process waits on round trips (fetch, ack, database) as well as
        # computing: what one process drains, besides what one core's CPU would allow.
        "worker_docs_per_process_s": statistics.median(
            r["drain"]["docs_per_s"] / r["workers"] for r in mine),
        "web_docs_per_core_s": 1000 / costs["web_cpu_ms"],
        "worker_docs_per_core_s": 1000 / costs["worker_cpu_ms"],
        "redis_docs_per_core_s": 1000 / costs["redis_cpu_ms"],
    }
    # What cannot grow with cores: Redis executes commands on one thread, SQLite has one
    # writer. PostgreSQL's backends run in parallel: its rate is per database core.
    ceilings = {"redis (one thread)": rates["redis_docs_per_core_s"]}
    if engine == "sqlite":
        rates["sqlite_writer_docs_s"] = 1000 / costs["db_writer_ms"]
        ceilings["sqlite single writer"] = rates["sqlite_writer_docs_s"]
    else:
        rates["postgres_docs_per_core_s"] = 1000 / costs["db_cpu_ms"]
    limit = min(ceilings, key=ceilings.__getitem__)
    throughput = {n: statistics.median(r["e2e"]["docs_per_s"] for r in mine if r["workers"] == n)
                  for n in sorted({r["workers"] for r in mine})}
    # Everything on one box (SQLite's cost is inside the web and worker processes' CPU).
    cpu_ms = (costs["web_cpu_ms"] + costs["worker_cpu_ms"] + costs["redis_cpu_ms"]
              + costs.get("db_cpu_ms", 0.0))
    # The submitting clients and the meters run on the same cores (absent from older runs).
    harness = [r["e2e"]["harness_cpu_ms"] for r in mine if "harness_cpu_ms" in r["e2e"]]
    harness_ms = statistics.median(harness) if harness else 0.0
    per_core_rates = {k: v for k, v in rates.items() if k.endswith("_per_core_s")}
    costliest = min(per_core_rates, key=per_core_rates.__getitem__)
    return {"engine": engine, "code": code, "costs": costs, "rates": rates, "ceilings": ceilings,
            "first_limit": limit, "first_limit_docs_s": ceilings[limit],
            "costliest_per_core": costliest,
            "cpu_ms_per_doc_all_components": cpu_ms,
            "one_box_docs_s_per_core": 1000 / cpu_ms,
            "harness_cpu_ms_per_doc": harness_ms,
            "this_box_docs_s": (os.cpu_count() or 1) * 1000 / (cpu_ms + harness_ms),
            "throughput_by_workers": throughput}


CONNECTIONS = 100  # connections opened and closed to price one


def connection_cost(server: Any) -> dict[str, float]:
    """CPU one PostgreSQL connection costs, opened and closed as Django does at CONN_MAX_AGE 0
    (a backend forked, scram-sha-256 authentication, exit): on the server and in the client."""
    own = psutil.Process()
    before_server, before_client = tree_cpu([server.proc.pid]), sum(own.cpu_times()[:2])
    for _ in range(CONNECTIONS):
        server.connect().close()
    time.sleep(0.5)  # the last backends exit and are reaped
    return {"server_cpu_ms": 1000 * (tree_cpu([server.proc.pid]) - before_server) / CONNECTIONS,
            "client_cpu_ms": 1000 * (sum(own.cpu_times()[:2]) - before_client) / CONNECTIONS}


def plot(rows: list[dict[str, Any]], engines: list[dict[str, Any]], name: str,
         before: list[dict[str, Any]] | None = None, load: list[float] | None = None) -> Path:
    loads = f", 1-minute load average {min(load):.1f}-{max(load):.1f}" if load else ""
    fig, (left, right) = new_figure(
        f"Document path: cost per document and throughput ({os.cpu_count()}-core machine"
        f"{loads})", ncols=2)
    # Left: CPU per document stacked by component (the code before beside it, if measured),
    # the benchmark's own clients on top, and the database beside.
    bars = [(f"{e['engine']}\nbefore", e) for e in before or []] + [
        (f"{e['engine']}\nnow" if before else e["engine"], e) for e in engines]
    comps = [("web", "web_cpu_ms", "#2a9d8f"), ("Celery worker", "worker_cpu_ms", "#e76f51"),
             ("Redis", "redis_cpu_ms", "#e63946")]
    for i, (_, e) in enumerate(bars):
        bottom = 0.0
        for label, key, color in comps:
            left.bar(i, e["costs"][key], 0.35, bottom=bottom, color=color,
                     label=f"{label} CPU" if i == 0 else None)
            bottom += e["costs"][key]
        harness = e.get("harness_cpu_ms_per_doc", 0.0)
        left.bar(i, harness, 0.35, bottom=bottom, color="#bbbbbb", hatch="//",
                 label="the benchmark's clients and meters (same cores)" if i == 0 else None)
        left.text(i, bottom + harness, f"{bottom:.1f}", ha="center", va="bottom", fontsize=7)
        left.bar(i + 0.38, e["costs"].get("db_writer_ms", e["costs"].get("db_cpu_ms")), 0.35,
                 color="#457b9d",
                 label="database (SQLite: writer held; PostgreSQL: CPU)" if i == 0 else None)
    left.set_xticks([i + 0.19 for i in range(len(bars))], [label for label, _ in bars])
    left.set_ylabel("ms per document")
    left.legend(fontsize=7)
    for e, color in zip(engines, ("#264653", "#8338ec"), strict=False):
        mine = sorted((r for r in rows if r["engine"] == e["engine"]), key=lambda r: r["workers"])
        right.plot([r["workers"] for r in mine], [r["e2e"]["docs_per_s"] for r in mine],
                   marker="o", linestyle="none", color=color,
                   label=f"{e['engine']}: measured end to end (each run)")
        by = e["throughput_by_workers"]
        right.plot([int(k) for k in by], list(by.values()), color=color)
        right.axhline(e["first_limit_docs_s"], color=color, linestyle="--",
                      label=f"{e['engine']} ceiling: {e['first_limit']} "
                            f"{e['first_limit_docs_s']:.0f}/s")
        cores = os.cpu_count() or 1
        box = e.get("this_box_docs_s", cores * e["one_box_docs_s_per_core"])
        right.axhline(box, color=color, linestyle=":",
                      label=f"{e['engine']}: this box's {cores} cores / CPU per document, "
                            f"clients included: {box:.0f}/s")
    for e, color in zip(before or [], ("#264653", "#8338ec"), strict=False):
        by = e["throughput_by_workers"]
        right.plot([int(k) for k in by], list(by.values()), color=color, alpha=0.4, linestyle="-.",
                   marker="x", label=f"{e['engine']}: the code before (--before), median")
    right.set_xticks(sorted({r["workers"] for r in rows}))
    right.set_xlabel("Celery worker processes (-c 1 each)")
    right.set_ylabel("documents done per second")
    right.set_yscale("log")
    right.legend(fontsize=7)
    return save_figure(fig, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=200, help="documents per phase")
    parser.add_argument("--workers", default="1,2,4", help="Celery worker process counts")
    parser.add_argument("--db", default="sqlite,postgres", help="engines, comma-separated")
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of every engine and worker count, interleaved")
    parser.add_argument("--clients", type=int, default=E2E_CLIENTS,
                        help="clients submitting in the end-to-end phase")
    parser.add_argument("--client", choices=sorted(CLIENT_KINDS), default="lean",
                        help="the submitting clients: kept-alive http.client, or requests")
    parser.add_argument("--in-flight", type=int, default=IN_FLIGHT,
                        help="end to end: documents submitted and unfinished at most "
                             "(0: unbounded, as every run before 2026-12-05 17:50)")
    parser.add_argument("--output", default="ceiling")
    parser.add_argument("--before", type=Path,
                        help="another checkout: every run made from it too, interleaved")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",") if n]
    engines = [e for e in args.db.split(",") if e]
    if (args.docs < max(SUBMITTERS, args.clients) or not counts or min(counts) < 1
            or args.repeats < 1 or args.clients < 1 or args.in_flight < 0):
        parser.error("--docs must be >= the clients, worker counts, --clients and --repeats "
                     ">= 1, --in-flight >= 0")
    if set(engines) - {"sqlite", "postgres"}:
        parser.error("--db takes sqlite and/or postgres")
    codes = {"now": tests.procs.ROOT}
    if args.before is not None:
        if not (args.before / "manage.py").is_file():
            parser.error(f"--before {args.before} is no checkout of the platform")
        codes = {"before": args.before.resolve(), "now": tests.procs.ROOT}
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(1))
    work = Path(tempfile.mkdtemp(prefix="ceiling-"))
    template = make_template_db(work / "template")
    pg = None
    if "postgres" in engines:
        from tests.pgserver import make_template_pg

        progress("starting PostgreSQL (platform/postgres) and migrating its template database")
        pg = make_template_pg(work / "pg")
    load_before = os.getloadavg()
    rows = []
    connection: dict[str, float] = {}
    try:
        # Interleaved (every configuration once, then again), so a load spike from other work
        # on the machine spreads over all of them.
        for repeat in range(1, args.repeats + 1):
            for engine in engines:
                for n in counts:
                    for code, root in codes.items():
                        progress(f"[{repeat}/{args.repeats}] {engine}, {n} Celery worker "
                                 f"process(es), code {code}: {args.docs} documents x 3 phases")
                        with code_at(root):
                            row = run_one(work, template, pg, engine, n, args.docs,
                                          tag=f"-{code}-{repeat}", e2e_clients=args.clients,
                                          client_kind=args.client,
                                          in_flight=args.in_flight)
                        rows.append({**row, "code": code})
        if pg is not None:
            connection = connection_cost(pg.server)
            progress(f"postgres: one connection opened and closed costs the server "
                     f"{connection['server_cpu_ms']:.2f} ms CPU, the client "
                     f"{connection['client_cpu_ms']:.2f} ms")
    finally:
        if pg is not None:
            pg.server.stop()
    result = [per_core(rows, e, code) for code in codes for e in engines]
    for e in result:
        if e["engine"] == "postgres" and connection:
            e["connection_cost"] = connection
            e["costs"]["db_cpu_ms_in_connections"] = (
                connection["server_cpu_ms"] * e["costs"]["db_sessions"])
    print()
    for e in result:
        c, r = e["costs"], e["rates"]
        db = (f"writer held {c['db_writer_ms']:.2f} ms" if "db_writer_ms" in c else
              f"CPU {c['db_cpu_ms']:.2f} ms, {c['db_commits']:.1f} commits, "
              f"{c['db_sessions']:.1f} connections opened, "
              f"{c['db_wal_bytes'] / 1024:.1f} KiB WAL")
        print(f"{e['engine']} ({e['code']}): per document: web {c['web_cpu_ms']:.1f} ms CPU, "
              f"worker {c['worker_cpu_ms']:.1f} ms CPU, Redis {c['redis_cpu_ms']:.2f} ms CPU "
              f"({c['redis_commands']:.0f} commands, "
              f"{c['redis_bytes_per_queued']:.0f} B per queued), database {db}")
        print("  docs/s per core: " + ", ".join(f"{k} {v:,.0f}" for k, v in r.items()))
        print(f"  all components on one box: {e['cpu_ms_per_doc_all_components']:.1f} ms CPU "
              f"per document = {e['one_box_docs_s_per_core']:.0f} docs/s per core; "
              f"costliest per core: {e['costliest_per_core']}")
        print(f"  with the clients and meters' {e['harness_cpu_ms_per_doc']:.1f} ms per document "
              f"on the same cores: at most {e['this_box_docs_s']:.0f} docs/s on this "
              f"{os.cpu_count()}-core box")
        if "connection_cost" in e:
            print(f"  of the database's CPU, {c['db_cpu_ms_in_connections']:.1f} ms is opening and "
                  f"closing {c['db_sessions']:.1f} connections "
                  f"({e['connection_cost']['server_cpu_ms']:.2f} ms each)")
        print(f"  first limit: {e['first_limit']} at {e['first_limit_docs_s']:,.0f} docs/s; "
              f"measured end to end by workers: "
              + ", ".join(f"{k}: {v:.1f}/s" for k, v in e["throughput_by_workers"].items()))
    load_after = os.getloadavg()
    loads = [load_before[0], load_after[0]]
    data = {"args": vars(args), "cores": os.cpu_count(), "machine": load_note(loads),
            "load_average_before": load_before, "load_average_after": load_after,
            "codes": {k: str(v) for k, v in codes.items()},
            "engines": result, "runs": rows}
    print(f"wrote {save_json(args.output, data)}")
    now = [e for e in result if e["code"] == "now"]
    before = [e for e in result if e["code"] == "before"]
    print(f"wrote {plot([r for r in rows if r['code'] == 'now'], now, args.output, before, loads)}")


if __name__ == "__main__":
    main()
