"""The chaos soak across hosts (``loadtests/chaos_soak.py --hosts``), judged by the history
checker.

Runs as root (``ip netns``). The topology of the partition tests (tests/partitions/conftest.py,
over TLS): a data host (Redis, PostgreSQL) and two app hosts, hostB and hostC, each running
web, a worker (two slots) and a beat, so beats elect across hosts and workers hand documents
over across hosts. The fast timings of those tests: heartbeat every 0.5 s (its key gone 2.5 s
after the last write), beat lock 5 s, periodic jobs every 1-2 s (tests/scheduler/beats.py).

Documents go in at --rate per second through the app hosts' web in turn (their front links,
as a load balancer reaches them), over the JSON API; every --long-every-th one works
--long-seconds (four heartbeat TTLs and more). Every --fault-every seconds on average, one
fault at random: cut an app host's link to the others (healed after 2-40 s), SIGKILL a
worker, a beat or a web server (the soak restarts whatever exits, as supervisord would on a
host), or SIGSTOP a worker for 1-8 s. Then: faults stopped, links healed, every acknowledged
document waited for (up to --drain seconds), and the history filled from the database, the
fence's journal and the client's record of answers, and judged by tests/history.py's
``check``. A first SIGINT/SIGTERM ends the faults early and still drains and counts; a second
one tears everything down at once.
"""

from __future__ import annotations

import argparse
import os
import queue
import random
import signal
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests

from loadtests.common import new_figure, progress, save_figure, save_json
from scheduler.fence import parse_journal
from tests.history import History, check, db_time, documents_history, journal_history, slots_history
from tests.partitions.conftest import Apart, start_apart
from tests.partitions.worker_cut import finished
from tests.procs import Client, Proc, Web
from tests.scheduler.beats import EVERY, LOCK_KEY, ROLLUP

FAULTS = ("cut", "sigkill-worker", "sigkill-beat", "sigkill-web", "sigstop-worker")
JOBS = list(EVERY)
JOURNAL_KEY = "platform:beat::journal"
CUT_S = (2.0, 40.0)
STOP_S = (1.0, 8.0)
RESTART_BACKOFF_S = 2.0  # as supervisord's, roughly: a process that exits at once waits
LONG_CANARY = "#!canary:work-seconds={seconds:g}"


@dataclass
class Submission:
    n: int
    host: str
    title: str
    long: bool
    at: float
    answered_at: float | None = None
    status: int | None = None  # the HTTP status; None: no answer (timeout, reset)
    doc_id: int | None = None
    error: str = ""

    @property
    def outcome(self) -> str:
        if self.status == 202 and self.doc_id is not None:
            return "acked"
        if self.status is not None:
            return "refused"
        return "unsent" if self.error.startswith("login") else "no-answer"


@dataclass
class HostsSoak:
    args: argparse.Namespace
    work: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="chaos-hosts-")))
    apart: Apart | None = None
    procs: dict[str, dict[str, Proc]] = field(default_factory=dict)
    webs: dict[str, Web] = field(default_factory=dict)
    submissions: list[Submission] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    exits: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    cuts: dict[str, tuple[float, dict[str, Any]]] = field(default_factory=dict)
    stopped: list[tuple[float, Proc, dict[str, Any]]] = field(default_factory=list)
    last_start: dict[tuple[str, str], float] = field(default_factory=dict)
    journal_lines: list[str] = field(default_factory=list)
    journal_seen: set[str] = field(default_factory=set)
    end_load: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    clients: dict[str, queue.SimpleQueue[Client]] = field(default_factory=dict)
    started_at: float = 0.0

    # --- the hosts ---------------------------------------------------------------------------
    def start(self) -> None:
        progress(f"building the network and the data host (TLS) in {self.work}")
        self.apart = start_apart(self.work)
        progress(f"network {self.apart.net.number}: " + ", ".join(
            f"{h.name} {h.back}" for h in self.apart.net.hosts.values()))
        for host in self.apart.hosts.values():
            if self.args.short_seconds is not None:
                host.env["DOCUMENTS_PROCESSING_SECONDS"] = f"{self.args.short_seconds:g}"
            self.procs[host.name] = {}
            self.clients[host.name] = queue.SimpleQueue()
            for role in ("worker", "beat", "web"):
                self.launch(host.name, role)
        client = self.apart.data.redis.client()
        for name, host in self.apart.hosts.items():
            host.wait_worker(self.procs[name]["worker"], client)
            host.wait_web(self.webs[name])
        self.started_at = time.time()
        progress("hosts up: web, worker and beat on " + ", ".join(self.apart.hosts))

    def launch(self, name: str, role: str) -> Proc:
        assert self.apart is not None
        host = self.apart.hosts[name]
        if role == "worker":
            proc = host.start_worker(concurrency=2)
        elif role == "beat":
            proc = host.start_beat()
        else:
            web = host.start_web(workers=1)
            self.webs[name] = web
            proc = web.proc
        self.procs[name][role] = proc
        self.last_start[(name, role)] = time.monotonic()
        return proc

    def supervise(self, *, faulted: set[int]) -> None:
        """Restart whatever exited (the faults' victims and any process that gave up)."""
        for name, roles in self.procs.items():
            for role, proc in list(roles.items()):
                if proc.alive():
                    continue
                if time.monotonic() - self.last_start[(name, role)] < RESTART_BACKOFF_S:
                    continue
                if proc.pid not in faulted:
                    lines = proc.log().splitlines()
                    why = [line for line in lines if "CRITICAL" in line][-1:] or lines[-3:]
                    self.exits.append({"host": name, "role": role, "pid": proc.pid,
                                       "returncode": proc.popen.returncode, "at": time.time(),
                                       "why": why})
                    progress(f"  exit (not a fault's): {role} on {name} pid {proc.pid} "
                             f"(code {proc.popen.returncode}): {' '.join(why)[-160:]}; "
                             "restarting")
                faulted.discard(proc.pid)
                self.launch(name, role)

    # --- faults ------------------------------------------------------------------------------
    def inject(self, fault: str, faulted: set[int]) -> dict[str, Any] | None:
        assert self.apart is not None
        now = time.time()
        if fault == "cut":
            free = [n for n in self.apart.hosts if n not in self.cuts]
            if not free:
                return None
            name = random.choice(free)
            seconds = random.uniform(*CUT_S)
            self.apart.net.cut(name)
            record = {"fault": fault, "host": name, "at": now, "for_s": round(seconds, 1)}
            self.cuts[name] = (time.monotonic() + seconds, record)
            return record
        name = random.choice(list(self.apart.hosts))
        role = fault.split("-", 1)[1]
        proc = self.procs[name][role]
        if not proc.alive():
            return None
        record = {"fault": fault, "host": name, "at": now, "pid": proc.pid}
        if fault == "sigstop-worker":
            if any(p is proc for _, p, _ in self.stopped):
                return None
            seconds = random.uniform(*STOP_S)
            proc.signal(signal.SIGSTOP, group=True)
            record["for_s"] = round(seconds, 1)
            self.stopped.append((time.monotonic() + seconds, proc, record))
        else:
            faulted.add(proc.pid)
            proc.signal(signal.SIGKILL, group=True)
        return record

    def end_faults_due(self, *, everything: bool = False) -> None:
        assert self.apart is not None
        now = time.monotonic()
        for name, (heal_at, record) in list(self.cuts.items()):
            if everything or now >= heal_at:
                self.apart.net.heal(name)
                record["healed_at"] = time.time()
                del self.cuts[name]
        for item in list(self.stopped):
            resume_at, proc, record = item
            if everything or now >= resume_at:
                try:
                    proc.signal(signal.SIGCONT, group=True)
                except ProcessLookupError:
                    pass
                record["resumed_at"] = time.time()
                self.stopped.remove(item)

    def fault_loop(self) -> None:
        faulted: set[int] = set()
        next_fault = time.monotonic() + random.expovariate(1.0 / self.args.fault_every)
        while not self.end_load.is_set():
            try:
                self.end_faults_due()
                self.supervise(faulted=faulted)
                if time.monotonic() >= next_fault:
                    next_fault += random.expovariate(1.0 / self.args.fault_every)
                    record = self.inject(random.choice(FAULTS), faulted)
                    if record:
                        self.faults.append(record)
                        extra = f" for {record['for_s']} s" if "for_s" in record else ""
                        progress(f"  fault: {record['fault']} {record['host']}{extra}")
            except Exception as exc:  # noqa: BLE001 - a fault that failed is logged, not fatal
                progress(f"  fault loop: {exc!r}")
                self.exits.append({"fault_loop_error": repr(exc), "at": time.time()})
            self.end_load.wait(0.25)  # the loop's tick: heals, resumes and restarts are due
        self.end_faults_due(everything=True)
        self.supervise(faulted=faulted)

    # --- load --------------------------------------------------------------------------------
    def session(self, name: str) -> Client:
        try:
            return self.clients[name].get_nowait()
        except queue.Empty:
            return Client.login(self.webs[name].base, "tester", "tester-password-1")

    def submit(self, sub: Submission) -> None:
        text = (f"Soak document {sub.n}. Contact ops{sub.n}@example.com or see "
                f"https://example.com/d/{sub.n}. Volume {100 + sub.n} units.\n")
        if sub.long:
            text += LONG_CANARY.format(seconds=self.args.long_seconds) + "\n"
        try:
            client = self.session(sub.host)
        except (requests.RequestException, AssertionError, KeyError) as exc:
            sub.error = f"login: {exc!r}"[:200]
            sub.answered_at = time.time()
            return
        try:
            r = client.post("/api/documents/", json={"title": sub.title, "text": text})
            sub.status = r.status_code
            if r.status_code == 202:
                sub.doc_id = int(r.json()["id"])
            if r.status_code < 500 and r.status_code not in (401, 403):
                self.clients[sub.host].put(client)  # a healthy session: used again
        except (requests.RequestException, KeyError, ValueError) as exc:
            sub.error = repr(exc)[:200]
        sub.answered_at = time.time()

    def submit_loop(self) -> None:
        interval = 1.0 / self.args.rate
        hosts = list(self.webs)
        next_at = time.monotonic()
        n = 0
        while not self.end_load.is_set():
            n += 1
            sub = Submission(n=n, host=hosts[n % len(hosts)], title=f"soak-{n:06d}",
                             long=n % self.args.long_every == 0, at=time.time())
            with self.lock:
                self.submissions.append(sub)
            threading.Thread(target=self.submit, args=(sub,), daemon=True).start()
            next_at += interval
            self.end_load.wait(max(0.0, next_at - time.monotonic()))

    # --- observing ---------------------------------------------------------------------------
    def read_journal(self) -> None:
        """The fence's journal is capped (10 000 lines): kept here as it grows."""
        assert self.apart is not None
        for line in self.apart.data.redis.client().lrange(JOURNAL_KEY, 0, -1):
            if line not in self.journal_seen:
                self.journal_seen.add(line)
                self.journal_lines.append(line)

    def acked_ids(self) -> list[int]:
        with self.lock:
            return [s.doc_id for s in self.submissions if s.outcome == "acked" and s.doc_id]

    def report_progress(self, phase: str) -> None:
        assert self.apart is not None
        ids = self.acked_ids()
        states: Counter[str] = Counter()
        if ids:
            marks = ",".join("?" * len(ids))
            states.update(dict(self.apart.data.query(
                f"SELECT state, COUNT(*) FROM documents_document WHERE id IN ({marks}) "
                f"GROUP BY state", *ids)))
        try:
            self.read_journal()
            lock = self.apart.data.redis.client().get(LOCK_KEY) or "-"
        except Exception as exc:  # noqa: BLE001 - a progress line must not end the run
            lock = f"? ({exc!r})"[:60]
        with self.lock:
            outcomes = Counter(s.outcome for s in self.submissions if s.answered_at)
            submitted = len(self.submissions)
        row = {"t": round(time.time() - self.started_at, 1), "submitted": submitted,
               "acknowledged": len(ids), "refused": outcomes["refused"],
               "no_answer": outcomes["no-answer"] + outcomes["unsent"],
               **{k: states[k] for k in ("queued", "processing", "done", "failed")},
               "faults": len(self.faults)}
        self.timeline.append(row)
        leader = lock.split("@", 1)[-1].split(":", 1)[0] if "@" in lock else lock
        progress(f"{phase} t={row['t']:.0f}s submitted {submitted} acknowledged {len(ids)} "
                 f"refused {row['refused']} no answer {row['no_answer']} done {row['done']} "
                 f"failed {row['failed']} queued {row['queued']} processing "
                 f"{row['processing']} faults {len(self.faults)} cut {sorted(self.cuts)} "
                 f"beat leader {leader}")

    # --- the run -----------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.start()
        threads = [threading.Thread(target=self.submit_loop, daemon=True),
                   threading.Thread(target=self.fault_loop, daemon=True)]
        for t in threads:
            t.start()
        end = time.monotonic() + self.args.minutes * 60
        while not self.end_load.wait(min(30.0, max(0.0, end - time.monotonic()))):
            self.report_progress("soak")
            if time.monotonic() >= end:
                break
        self.end_load.set()
        for t in threads:
            t.join(timeout=60)
        load_ended = time.time()
        stopped_early = time.monotonic() < end - 1
        progress(f"faults and submissions stopped{' early' if stopped_early else ''}; links "
                 f"healed; draining (up to {self.args.drain:g} s)")
        answered_by = time.monotonic() + 40  # a request in flight ends by its own timeout
        while time.monotonic() < answered_by:
            with self.lock:
                if all(s.answered_at for s in self.submissions):
                    break
            time.sleep(0.5)
        deadline = time.monotonic() + self.args.drain
        last = time.monotonic()
        drained = False
        while time.monotonic() < deadline:
            assert self.apart is not None
            if finished(self.apart.data, self.acked_ids() or [0]) or not self.acked_ids():
                drained = True
                break
            time.sleep(1)
            if time.monotonic() - last >= 30:
                self.report_progress("drain")
                last = time.monotonic()
        self.report_progress("drained" if drained else "drain deadline")
        result = self.judge(load_ended)
        result.update({"drained": drained, "drain_s": round(time.time() - load_ended, 1),
                       "stopped_early": stopped_early})
        return result

    def judge(self, load_ended: float) -> dict[str, Any]:
        assert self.apart is not None
        data = self.apart.data
        self.read_journal()
        subs = list(self.submissions)
        acked = [s for s in subs if s.outcome == "acked"]
        ids = [s.doc_id for s in acked if s.doc_id]
        history = History()
        for s in acked:
            history.add("acked", s.doc_id, host=s.host, at=s.answered_at or s.at)
        for s in subs:
            if s.outcome == "refused":
                history.add("refused", f"title:{s.title}", host=s.host, at=s.answered_at or 0)
        documents_history(data, history, ids)
        rows = {r[0]: r[1] for r in data.query(
            "SELECT title, id FROM documents_document WHERE title LIKE 'soak-%'")}
        for s in subs:
            if s.outcome == "refused" and s.title in rows:
                history.add("kept", f"title:{s.title}")
        journal = parse_journal(self.journal_lines)
        journal_history(journal, history, jobs=JOBS)
        slots_history(data, history, jobs=JOBS)
        verdict = check(history, every={ROLLUP: EVERY[ROLLUP]})
        no_answer = [s for s in subs if s.outcome in ("no-answer", "unsent")]
        failed = data.query("SELECT id, starts, failure_reason FROM documents_document "
                            "WHERE state = 'failed' AND title LIKE 'soak-%'")
        still_running = data.query(
            "SELECT COUNT(*) FROM documents_documentrun WHERE outcome = 'running'")[0][0]
        counts = {
            "submitted": len(subs), "acknowledged": len(acked),
            "acknowledged_long": sum(s.long for s in acked),
            "refused": sum(s.outcome == "refused" for s in subs),
            "refused_by_status": dict(Counter(str(s.status) for s in subs
                                              if s.outcome == "refused")),
            "no_answer": len(no_answer),
            "no_answer_kept": sum(s.title in rows for s in no_answer),
            "done": verdict.done, "failed": len(failed),
            "lost": len(verdict.lost), "stuck": len(verdict.stuck),
            "doubled": len([k for k in verdict.doubled if "|" not in k]),
            "effects_twice": len(verdict.effects_twice),
            "late_results_dropped": verdict.dropped, "runs_left_running": still_running,
            "ack_not_kept": len(verdict.ack_not_kept),
            "refused_but_kept": len(verdict.refused_but_kept),
            "two_owners": len(verdict.two_owners), "stale_publish": len(verdict.stale_publish),
        }
        violations = verdict.violations
        return {
            "counts": counts, "checker": verdict.counts(),
            "violations": {k: v[:100] for k, v in violations.items()},
            "evidence": self.evidence(violations),
            "slots": self.slots(history, verdict, load_ended),
            "faults": dict(Counter(f["fault"] for f in self.faults)),
            "fault_log": self.faults, "exits": self.exits,
            "exits_by_role": dict(Counter(e.get("role", "fault loop") for e in self.exits)),
            "failed_detail": [list(map(str, r)) for r in failed],
            "timeline": self.timeline,
            "submissions": [asdict(s) | {"outcome": s.outcome} for s in subs],
            "completions": [db_time(r[0]).timestamp() for r in data.query(
                "SELECT MIN(r.finished_at) FROM documents_documentrun r JOIN "
                "documents_document d ON d.id = r.document_id WHERE r.outcome = 'done' "
                "AND d.title LIKE 'soak-%' GROUP BY r.document_id")],
            "elections": sum(e.kind == "elected" for e in journal),
            "journal_lines": len(self.journal_lines),
            "started_at": self.started_at, "load_ended": load_ended,
            "settings": dict(vars(self.args)), "job_every_s": EVERY,
            "work_dir": str(self.work),
        }

    def evidence(self, violations: dict[str, list[str]]) -> dict[str, list[str]]:
        """Each violated document's runs (node, outcome, times) and facts, for the report."""
        assert self.apart is not None
        docs = sorted({int(k.split(":", 1)[0]) for name, keys in violations.items()
                       if name in ("lost", "stuck", "doubled", "effects_twice", "ack_not_kept")
                       for k in keys if k.split(":", 1)[0].isdigit()})[:30]
        out = {}
        for doc in docs:
            out[str(doc)] = [" ".join(map(str, r)) for r in self.apart.data.query(
                "SELECT worker, outcome, started_at, finished_at FROM documents_documentrun "
                "WHERE document_id = ? ORDER BY id", doc)] + [
                " ".join(map(str, r)) for r in self.apart.data.query(
                    "SELECT id, state, starts, generation FROM documents_document "
                    "WHERE id = ?", doc)]
        return out

    def slots(self, history: History, verdict: Any, load_ended: float) -> dict[str, Any]:
        """Per job: grid slots due while the load ran (one spacing in from either end),
        published, run, published or run twice, and not seen at all. The grid is
        ``offset + k * every`` (scheduler/jobs.py), with the soak's spacing (BEAT_ENV)."""
        from scheduler.tables import JOBS as TABLE

        fired = {op.key for op in history.of("fired")}
        ran = {op.key for op in history.of("ran")}
        twice = set(verdict.fired_twice) | {k for k in verdict.doubled if "|" in k}
        out: dict[str, Any] = {}
        for name in JOBS:
            every = EVERY[name]
            offset = TABLE[name].offset % every
            first = int((self.started_at - offset) // every) + 2
            last = int((load_ended - offset) // every) - 1
            due = {f"{name}|{datetime.fromtimestamp(offset + k * every, tz=UTC).isoformat()}"
                   for k in range(first, last + 1)}
            out[name] = {
                "every_s": every, "due": len(due), "fired": len(due & fired),
                "run": len(due & ran), "twice": len(due & twice),
                "not_seen": len(due - fired - ran),
                "missed_by_checker": sum(k.startswith(name + "|") for k in verdict.missed),
                "fired_unrun": len((due & fired) - ran),
            }
        return out


def plot(result: dict[str, Any]) -> Path:
    fig, (left, right) = new_figure("Chaos soak across hosts: cuts, kills, stops "
                                    "(one shared 2-core machine)", ncols=2)
    t0 = result["started_at"]
    acks = sorted(s["answered_at"] for s in result["submissions"] if s["outcome"] == "acked")
    done = sorted(result["completions"])
    left.step([(t - t0) / 60 for t in acks], range(1, len(acks) + 1), where="post",
              label="acknowledged")
    left.step([(t - t0) / 60 for t in done], range(1, len(done) + 1), where="post",
              label="done")
    colors = {"sigkill-worker": "#e63946", "sigkill-beat": "#6a4c93", "sigkill-web": "#457b9d",
              "sigstop-worker": "#f4a261"}
    cut_colors = {"hostB": "#2a9d8f", "hostC": "#e9c46a"}
    for f in result["fault_log"]:
        x = (f["at"] - t0) / 60
        if f["fault"] == "cut":
            end = (f.get("healed_at", f["at"] + f["for_s"]) - t0) / 60
            left.axvspan(x, end, color=cut_colors.get(f["host"], "#999999"), alpha=0.18,
                         linewidth=0)
        else:
            left.axvline(x, color=colors[f["fault"]], alpha=0.5, linewidth=0.8)
    left.axvline((result["load_ended"] - t0) / 60, color="black", linestyle="--",
                 linewidth=0.8)
    for kind, color in colors.items():
        if result["faults"].get(kind):
            left.plot([], [], color=color, linewidth=0.8, label=kind)
    for host, color in cut_colors.items():
        if any(f["fault"] == "cut" and f["host"] == host for f in result["fault_log"]):
            left.fill_between([], [], color=color, alpha=0.3, label=f"{host} cut")
    left.set_xlabel("minutes (bands: hostB/hostC cut; lines: kills, stops; dashed: end)")
    left.set_ylabel("documents")
    left.legend(fontsize=7, loc="upper left")
    c = result["counts"]
    names = ["acknowledged", "done", "failed", "refused", "no_answer", "lost", "stuck",
             "doubled", "effects_twice", "two_owners"]
    right.bar(names, [c[n] for n in names],
              color=["#457b9d", "#2a9d8f", "#f4a261", "#999999", "#999999"] + ["#e63946"] * 5)
    for i, n in enumerate(names):
        right.text(i, c[n], str(c[n]), ha="center", va="bottom", fontsize=8)
    right.tick_params(axis="x", labelrotation=60, labelsize=7)
    right.set_title(", ".join(f"{k} {v}" for k, v in sorted(result["faults"].items())),
                    fontsize=7)
    return save_figure(fig, "chaos_soak_hosts")


def main(args: argparse.Namespace) -> None:
    """The --hosts run: everything torn down however it ends (an exception, a second
    signal); exit status 1 when the checker names a violation."""
    if os.geteuid() != 0:
        raise SystemExit("--hosts needs root (ip netns)")
    soak = HostsSoak(args)
    signals = {"n": 0}

    def on_signal(*_: object) -> None:
        signals["n"] += 1
        if signals["n"] == 1 and soak.started_at:
            progress("signal: ending the faults early; draining and counting "
                     "(again to tear down at once)")
            soak.end_load.set()
            return
        raise SystemExit(1)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        result = soak.run()
    finally:
        for t in signal.SIGTERM, signal.SIGINT:
            signal.signal(t, lambda *_: None)  # the teardown runs to its end
        if soak.apart is not None:
            progress("tearing down: processes by pid, then the namespaces")
            soak.end_load.set()
            soak.apart.stop()
        for t in signal.SIGTERM, signal.SIGINT:
            signal.signal(t, signal.SIG_DFL)
    c = result["counts"]
    print(f"\nsubmitted {c['submitted']}: acknowledged {c['acknowledged']} (long "
          f"{c['acknowledged_long']}), refused {c['refused']} {c['refused_by_status']}, no "
          f"answer {c['no_answer']} (of which kept {c['no_answer_kept']})")
    print(f"done {c['done']}  failed {c['failed']}  lost {c['lost']}  stuck {c['stuck']}  "
          f"doubled {c['doubled']}  effects twice {c['effects_twice']}  late results dropped "
          f"{c['late_results_dropped']}  two owners {c['two_owners']}  stale publishes "
          f"{c['stale_publish']}  drain {result['drain_s']} s")
    print("faults: " + ", ".join(f"{k} {v}" for k, v in sorted(result["faults"].items()))
          + f"; exits not a fault's, restarted: {result['exits_by_role']}; elections "
          f"{result['elections']}")
    for name, s in result["slots"].items():
        print(f"{name:<24} every {s['every_s']} s  due {s['due']:>4}  fired {s['fired']:>4}  "
              f"run {s['run']:>4}  twice {s['twice']}  not seen {s['not_seen']}  missed "
              f"(checker) {s['missed_by_checker']}  fired unrun {s['fired_unrun']}")
    if result["violations"]:
        print(f"VIOLATIONS: {result['violations']}")
        print(f"evidence: {result['evidence']}")
    print(f"\nwrote {save_json('chaos_soak_hosts', result)}")
    print(f"wrote {plot(result)}")
    if result["violations"]:
        raise SystemExit(1)
