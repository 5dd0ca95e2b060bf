"""Chaos soak: the whole platform as the README starts it, documents over HTTP, random kills.

    .venv/bin/python loadtests/chaos_soak.py [--minutes 3] [--rate 0.3] [--fault-every 20]

Starts ``bash platform/up`` with its own var directory and free ports (``PLATFORM_VAR_DIR``,
``REDIS_PORT``, ``WEB_PORT``, ``FLOWER_PORT``), logs in with the development login it made,
and for --minutes submits documents at --rate per second as that user, alternating the
Documents page's form and the JSON API. Every --long-every-th document carries the operator's
canary ``#!canary:work-seconds=N`` and runs --long-seconds (longer than the 30 s visibility
timeout); the rest run --short-seconds. Meanwhile, every --fault-every seconds on average, one
fault at random: SIGKILL a whole worker, SIGKILL one pool child, SIGTERM a worker (a deploy),
SIGKILL a beat, SIGKILL a web worker, SIGKILL Redis. supervisord restarts what dies, as on a
customer's box. Periodic jobs run every minute or two (environment overrides) so their slots
can be counted.

With ``--hosts``, the same load and faults across hosts in network namespaces (a data host
and two app hosts, each with web, worker and beat), with random cuts and heals of an app
host's link among the faults, judged by the history checker: loadtests/chaos_hosts.py.

    .venv/bin/python loadtests/chaos_soak.py --hosts [--minutes 30] [--seed 1]

Then it stops the faults and the submissions, waits up to --drain seconds for every
acknowledged document, and counts: acknowledged (202 from the API, the redirect from the
form), refused (any other answer: 503 while Redis restarts, a dropped connection), done,
failed (with reasons), stuck (still queued or processing), lost (acknowledged, no row) and
doubled (more than one finished run, or facts written twice); periodic slots run, missed,
lost and doubled. Progress every 30 s. Writes loadtests/results/chaos_soak.{json,png}.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psutil
import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.common import new_figure, progress, save_figure, save_json  # noqa: E402
from tests.procs import Client, free_port  # noqa: E402

FAULTS = ("sigkill-worker", "sigkill-pool-child", "sigterm-worker", "sigkill-beat",
          "sigkill-web", "sigkill-redis")
# Periodic jobs fire this often during the soak (scheduler/tables.py reads these), so a
# 30-minute run has enough slots to count.
JOB_INTERVALS = {"REPORTS_ROLLUP_EVERY_S": "60", "REPORTS_PURGE_EVERY_S": "120",
                 "REPORTS_DIGEST_EVERY_S": "300"}
LONG_CANARY = "#!canary:work-seconds={seconds:g}"


@dataclass
class Submission:
    n: int
    via: str  # "api" or "form"
    title: str
    long: bool
    at: float
    status: int | None = None  # HTTP status, None when the connection failed
    doc_id: int | None = None

    @property
    def acknowledged(self) -> bool:
        return (self.via == "api" and self.status == 202) or (
            self.via == "form" and self.status == 302)


@dataclass
class Soak:
    args: argparse.Namespace
    work: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="chaos-soak-")))
    submissions: list[Submission] = field(default_factory=list)
    faults: list[dict] = field(default_factory=list)
    timeline: list[dict] = field(default_factory=list)
    up: subprocess.Popen | None = None
    stop_flag: threading.Event = field(default_factory=threading.Event)

    # --- the platform, started the way the README says ------------------------------------
    @property
    def var(self) -> Path:
        return self.work / "var"

    def start(self) -> None:
        self.ports = {"REDIS_PORT": free_port(), "WEB_PORT": free_port(),
                      "FLOWER_PORT": free_port()}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST_"))}
        env.update({k: str(v) for k, v in self.ports.items()})
        env.update(JOB_INTERVALS)
        env.update({"PLATFORM_VAR_DIR": str(self.var),
                    "DOCUMENTS_PROCESSING_SECONDS": f"{self.args.short_seconds:g}",
                    "METERING_DAILY_LIMIT": "1000000"})
        self.up_log = self.work / "platform-up.log"
        progress(f"bash platform/up (var {self.var}, web port {self.ports['WEB_PORT']})")
        with open(self.up_log, "ab") as log:
            # Its own session: SIGTERM reaches its trap (bash ignores SIGINT in the background).
            self.up = subprocess.Popen(["bash", "platform/up"], cwd=ROOT, env=env, stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        deadline = time.monotonic() + 600  # a fresh machine installs packages first
        while "running; press Ctrl-C" not in self.up_log.read_text(errors="replace"):
            if self.up.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"platform/up did not start:\n{self.up_log.read_text()[-3000:]}")
            time.sleep(1)
        dev = dict(line.split("=", 1) for line in
                   (self.var / "dev.env").read_text().splitlines() if "=" in line)
        self.base = f"http://127.0.0.1:{self.ports['WEB_PORT']}"
        self.login = (dev["DEV_USER"], dev["DEV_USER_PASSWORD"])
        self.started_at = time.time()
        progress("platform up: " + ", ".join(f"{k} {len(v)}" for k, v in self.roles().items()))

    def stop(self) -> None:
        if self.up is not None and self.up.poll() is None:
            progress("stopping the platform (SIGTERM to platform/up)")
            self.up.send_signal(signal.SIGTERM)
            try:
                self.up.wait(timeout=450)
            except subprocess.TimeoutExpired:
                os.killpg(self.up.pid, signal.SIGKILL)

    # --- which process is which, from supervisord's children -------------------------------
    def roles(self) -> dict[str, list[psutil.Process]]:
        roles: dict[str, list[psutil.Process]] = {
            "redis": [], "web-main": [], "web": [], "worker": [], "pool": [], "beat": [],
            "flower": []}
        if self.up is None:
            return roles
        for proc in psutil.Process(self.up.pid).children(recursive=True):
            try:
                cmd = " ".join(proc.cmdline())
                parent = proc.parent()
                parent_cmd = " ".join(parent.cmdline()) if parent else ""
            except psutil.Error:
                continue
            if "redis-server" in cmd:
                roles["redis"].append(proc)
            elif "uvicorn" in cmd and "uvicorn" not in parent_cmd:
                roles["web-main"].append(proc)
            elif "uvicorn" in parent_cmd and "spawn_main" in cmd:  # not the resource tracker
                roles["web"].append(proc)
            elif " worker " in cmd and "celery" in cmd and " worker " not in parent_cmd:
                roles["worker"].append(proc)
            elif " worker " in parent_cmd and "celery" in parent_cmd:
                roles["pool"].append(proc)
            elif " beat " in cmd and " beat " not in parent_cmd:
                roles["beat"].append(proc)
            elif " flower" in cmd:
                roles["flower"].append(proc)
        return roles

    def inject(self, fault: str) -> dict | None:
        roles = self.roles()
        pick = {"sigkill-worker": "worker", "sigkill-pool-child": "pool",
                "sigterm-worker": "worker", "sigkill-beat": "beat", "sigkill-web": "web",
                "sigkill-redis": "redis"}[fault]
        if pick == "web" and len(roles["web"]) < 2:
            pick = "web-main"  # uvicorn had not replaced its worker yet: kill the server
        candidates = roles[pick]
        if not candidates:
            return None
        victim = random.choice(candidates)
        try:
            name = " ".join(victim.cmdline())[:80]
            if fault == "sigkill-worker":
                # The whole worker, main process and pool, as an OOM kill of the group or a
                # lost host would; supervisord starts each program in its own process group.
                os.killpg(os.getpgid(victim.pid), signal.SIGKILL)
            elif fault == "sigterm-worker":
                victim.send_signal(signal.SIGTERM)
            elif pick == "web-main":
                os.killpg(os.getpgid(victim.pid), signal.SIGKILL)
            else:
                victim.send_signal(signal.SIGKILL)
        except (psutil.Error, ProcessLookupError):
            return None
        return {"fault": fault, "at": time.time(), "pid": victim.pid, "process": name}

    # --- load ------------------------------------------------------------------------------
    def client(self) -> Client:
        return Client.login(self.base, *self.login)

    def submit_loop(self) -> None:
        client: Client | None = None
        n = 0
        interval = 1.0 / self.args.rate
        next_at = time.monotonic()
        while not self.stop_flag.is_set():
            n += 1
            long = n % self.args.long_every == 0
            via = "api" if n % 2 else "form"
            title = f"soak-{n:06d}"
            text = (f"Soak document {n}. Contact ops{n}@example.com or see "
                    f"https://example.com/d/{n}. Volume {100 + n} units.\n")
            if long:
                text += LONG_CANARY.format(seconds=self.args.long_seconds) + "\n"
            sub = Submission(n=n, via=via, title=title, long=long, at=time.time())
            try:
                if client is None:
                    client = self.client()
                if via == "api":
                    r = client.post("/api/documents/", json={"title": title, "text": text})
                    sub.status = r.status_code
                    if r.status_code == 202:
                        sub.doc_id = int(r.json()["id"])
                else:
                    r = client.post("/documents/", data={"title": title, "text": text},
                                    allow_redirects=False)
                    sub.status = r.status_code
                    if r.status_code == 302 and "/accounts/login" in r.headers.get("Location", ""):
                        sub.status, client = None, None  # session lost: not acknowledged
            except (requests.RequestException, AssertionError, KeyError, ValueError):
                client = None  # log in again on the next submission
            self.submissions.append(sub)
            next_at += interval
            self.stop_flag.wait(max(0.0, next_at - time.monotonic()))

    def fault_loop(self) -> None:
        while not self.stop_flag.wait(random.expovariate(1.0 / self.args.fault_every)):
            fault = self.inject(random.choice(FAULTS))
            if fault:
                self.faults.append(fault)
                progress(f"  fault: {fault['fault']} pid {fault['pid']}")

    # --- counting, from the platform's own database ---------------------------------------
    @contextmanager
    def db(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(f"file:{self.var / 'db.sqlite3'}?mode=ro", uri=True, timeout=30)
        conn.row_factory = sqlite3.Row
        try:
            yield conn
        finally:
            conn.close()

    def documents(self) -> dict[str, sqlite3.Row]:
        with self.db() as conn:
            rows = conn.execute("SELECT id, title, state, starts, content, failure_reason "
                                "FROM documents_document WHERE title LIKE 'soak-%'").fetchall()
        return {row["title"]: row for row in rows}

    def state_counts(self) -> Counter:
        docs = self.documents()
        acked = [s for s in list(self.submissions) if s.acknowledged]
        return Counter(docs[s.title]["state"] if s.title in docs else "missing" for s in acked)

    def tally(self) -> dict:
        from apps.documents import processing

        processing._simulate_work = lambda seconds: None  # count facts, not the canary's wait
        docs = self.documents()
        with self.db() as conn:
            done_runs = dict(conn.execute(
                "SELECT document_id, COUNT(*) FROM documents_documentrun "
                "WHERE outcome = 'done' GROUP BY document_id").fetchall())
            facts = dict(conn.execute(
                "SELECT document_id, COUNT(*) FROM documents_documentfact "
                "GROUP BY document_id").fetchall())
        acked = [s for s in self.submissions if s.acknowledged]
        out = Counter()
        stuck, lost, doubled, failed = [], [], [], []
        for s in acked:
            row = docs.get(s.title)
            if row is None:
                lost.append(s.title)
                continue
            if row["state"] == "done":
                out["done"] += 1
                expected = len(processing.process_text(row["content"]).facts)
                if done_runs.get(row["id"], 0) != 1 or facts.get(row["id"], 0) != expected:
                    doubled.append({"id": row["id"], "done_runs": done_runs.get(row["id"], 0),
                                    "facts": facts.get(row["id"], 0), "expected": expected})
            elif row["state"] == "failed":
                failed.append({"id": row["id"], "starts": row["starts"],
                               "reason": row["failure_reason"]})
            else:
                stuck.append({"id": row["id"], "state": row["state"], "starts": row["starts"],
                              "long": s.long})
        refused = [s for s in self.submissions if not s.acknowledged]
        unacked_rows = sum(1 for s in refused if s.title in docs)
        return {
            "submitted": len(self.submissions), "acknowledged": len(acked),
            "acknowledged_long": sum(s.long for s in acked),
            "acknowledged_api": sum(s.via == "api" for s in acked),
            "acknowledged_form": sum(s.via == "form" for s in acked),
            "refused": len(refused),
            "refused_by_status": dict(Counter(str(s.status) for s in refused)),
            "refused_but_saved": unacked_rows,
            "done": out["done"], "failed": len(failed), "stuck": len(stuck),
            "lost": len(lost), "doubled": len(doubled),
            "extra_starts": sum(max(docs[s.title]["starts"] - 1, 0)
                                for s in acked if s.title in docs),
            "failed_detail": failed, "stuck_detail": stuck, "lost_detail": lost,
            "doubled_detail": doubled,
        }

    def slots(self, window: tuple[float, float]) -> dict:
        """Periodic slots due in the window: run once, missed, lost or run twice."""
        os.environ.update(JOB_INTERVALS)
        from scheduler.tables import JOBS

        with self.db() as conn:
            runs = conn.execute("SELECT job, slot, outcome, duplicates FROM reports_jobrun "
                                "WHERE kind = 'scheduled'").fetchall()
        by_slot: dict[tuple[str, str], list[sqlite3.Row]] = {}
        for r in runs:
            slot = datetime.fromisoformat(str(r["slot"])).replace(tzinfo=UTC).replace(
                microsecond=0).isoformat()
            by_slot.setdefault((r["job"], slot), []).append(r)
        result = {}
        for name, job in JOBS.items():
            # A slot is due if it fell in the window, one period after start-up (the first
            # slot after a fresh beat is its first tick) and a minute before the end.
            first = job.slot_index(datetime.fromtimestamp(window[0] + job.every, tz=UTC))
            last = job.slot_index(datetime.fromtimestamp(window[1] - 60, tz=UTC))
            due = [job.slot_start(i).replace(microsecond=0).isoformat()
                   for i in range(first, last + 1)]
            rows = [by_slot.get((name, s), []) for s in due]
            result[name] = {
                "every_s": job.every, "due": len(due),
                "done": sum(1 for r in rows if any(x["outcome"] == "done" for x in r)),
                "lost": sum(1 for r in rows if r and all(x["outcome"] == "lost" for x in r)),
                "failed": sum(1 for r in rows if r and all(x["outcome"] == "failed" for x in r)),
                "missed": sum(1 for r in rows if not r),
                "doubled": sum(1 for r in rows if sum(x["outcome"] == "done" for x in r) > 1),
                "second_deliveries_fenced": sum(x["duplicates"] for r in rows for x in r),
                "missed_slots": [s for s, r in zip(due, rows, strict=True) if not r],
            }
        return result

    # --- the run ---------------------------------------------------------------------------
    def run(self) -> dict:
        self.start()
        threads = [threading.Thread(target=self.submit_loop, daemon=True),
                   threading.Thread(target=self.fault_loop, daemon=True)]
        for t in threads:
            t.start()
        end = time.monotonic() + self.args.minutes * 60
        while time.monotonic() < end:
            time.sleep(min(30, max(0.0, end - time.monotonic())))
            self.report_progress("soak")
        self.stop_flag.set()
        for t in threads:
            t.join(timeout=60)
        load_ended = time.time()
        progress(f"faults and submissions stopped; draining (up to {self.args.drain} s)")
        deadline = time.monotonic() + self.args.drain
        last_report = time.monotonic()
        while time.monotonic() < deadline:
            counts = self.state_counts()
            if counts["queued"] + counts["processing"] == 0:
                break
            time.sleep(5)
            if time.monotonic() - last_report >= 30:
                self.report_progress("drain")
                last_report = time.monotonic()
        self.report_progress("drained")
        drained = time.time()
        result = {"tally": self.tally(),
                  "slots": self.slots((self.started_at, load_ended)),
                  "faults": dict(Counter(f["fault"] for f in self.faults)),
                  "fault_log": self.faults, "timeline": self.timeline,
                  "minutes": self.args.minutes, "drain_s": round(drained - load_ended, 1),
                  "settings": {k: v for k, v in vars(self.args).items()},
                  "note": "one run on one shared, loaded 2-core machine"}
        return result

    def report_progress(self, phase: str) -> None:
        counts = self.state_counts()
        acked = sum(counts.values())
        row = {"t": round(time.time() - self.started_at, 1), "submitted": len(self.submissions),
               "acknowledged": acked, **{k: counts[k] for k in
                                         ("queued", "processing", "done", "failed", "missing")},
               "faults": len(self.faults)}
        self.timeline.append(row)
        progress(f"{phase} t={row['t']:.0f}s submitted {row['submitted']} acknowledged {acked} "
                 f"done {row['done']} failed {row['failed']} queued {row['queued']} "
                 f"processing {row['processing']} faults {row['faults']}")


def plot(result: dict) -> Path:
    fig, (left, right) = new_figure("Chaos soak: documents under random kills "
                                    "(one shared, loaded 2-core machine)", ncols=2)
    tl = result["timeline"]
    left.plot([r["t"] / 60 for r in tl], [r["acknowledged"] for r in tl], label="acknowledged")
    left.plot([r["t"] / 60 for r in tl], [r["done"] for r in tl], label="done")
    colors = dict(zip(FAULTS, ("#e63946", "#f4a261", "#2a9d8f", "#6a4c93", "#457b9d",
                               "#000000"), strict=True))
    t0 = result["started_at"]
    for f in result["fault_log"]:
        left.axvline((f["at"] - t0) / 60, color=colors[f["fault"]], alpha=0.25, linewidth=0.8)
    left.set_xlabel("minutes (vertical lines: faults)")
    left.set_ylabel("documents")
    left.legend(fontsize=8)
    t = result["tally"]
    names = ["acknowledged", "done", "failed", "stuck", "lost", "doubled"]
    right.bar(names, [t[n] for n in names],
              color=["#457b9d", "#2a9d8f", "#f4a261", "#e63946", "#e63946", "#e63946"])
    for i, n in enumerate(names):
        right.text(i, t[n], str(t[n]), ha="center", va="bottom", fontsize=8)
    faults = ", ".join(f"{k} {v}" for k, v in sorted(result["faults"].items()))
    right.set_title(faults, fontsize=7)
    return save_figure(fig, "chaos_soak")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="how long to inject faults")
    parser.add_argument("--rate", type=float, default=0.3,
                        help="documents submitted per second (the 4 pool processes keep up)")
    parser.add_argument("--fault-every", type=float, default=20.0,
                        help="mean seconds between faults")
    parser.add_argument("--long-every", type=int, default=6,
                        help="every Nth document is a long one")
    parser.add_argument("--long-seconds", type=float, default=None,
                        help="work of a long document (default 45: the visibility timeout is "
                             "30 s; with --hosts 10: four heartbeat TTLs)")
    parser.add_argument("--short-seconds", type=float, default=None,
                        help="work of the other documents (default 2; with --hosts 0.5)")
    parser.add_argument("--drain", type=float, default=None,
                        help="seconds to wait for acknowledged documents after the faults stop "
                             "(default 600; with --hosts 300)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (faults, victims)")
    parser.add_argument("--hosts", action="store_true",
                        help="across hosts in network namespaces, with cuts and heals, judged "
                             "by the history checker (loadtests/chaos_hosts.py; root)")
    args = parser.parse_args()
    if args.long_seconds is None:
        args.long_seconds = 10.0 if args.hosts else 45.0
    if args.short_seconds is None and not args.hosts:
        args.short_seconds = 2.0
    if args.drain is None:
        args.drain = 300.0 if args.hosts else 600.0
    if args.minutes <= 0 or args.rate <= 0 or args.fault_every <= 0 or args.long_every < 2:
        parser.error("--minutes, --rate and --fault-every must be positive, --long-every >= 2")
    if args.long_seconds > 120:
        parser.error("--long-seconds is capped at 120 by the canary")
    # SIGTERM or SIGINT (which a background job of a script ignores) stops everything started.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(1))
    random.seed(args.seed)
    if args.hosts:
        from loadtests import chaos_hosts

        chaos_hosts.main(args)
        return
    soak = Soak(args)
    try:
        result = soak.run()
    finally:
        soak.stop()
    result["started_at"] = soak.started_at
    result["var_dir"] = str(soak.var)
    t = result["tally"]
    print(f"\nacknowledged {t['acknowledged']} (long {t['acknowledged_long']}, api "
          f"{t['acknowledged_api']}, form {t['acknowledged_form']}), refused {t['refused']} "
          f"{t['refused_by_status']}")
    print(f"done {t['done']}  failed {t['failed']}  stuck {t['stuck']}  lost {t['lost']}  "
          f"doubled {t['doubled']}  extra starts {t['extra_starts']}  drain {result['drain_s']} s")
    print("faults: " + ", ".join(f"{k} {v}" for k, v in sorted(result["faults"].items())))
    for name, s in result["slots"].items():
        print(f"{name:<28} due {s['due']:>3}  run {s['done']:>3}  missed {s['missed']:>3}  "
              f"lost {s['lost']:>2}  failed {s['failed']:>2}  doubled {s['doubled']}  "
              f"fenced second deliveries {s['second_deliveries_fenced']}")
    for key in ("failed_detail", "stuck_detail", "lost_detail", "doubled_detail"):
        if t[key]:
            print(f"{key}: {t[key]}")
    print(f"\nwrote {save_json('chaos_soak', result)}")
    print(f"wrote {plot(result)}")
    if t["lost"] or t["stuck"] or t["doubled"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
