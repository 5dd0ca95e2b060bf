"""Throughput of the platform's configurations against vanilla Celery, in one run on one machine.

    .venv/bin/python loadtests/throughput_comparison.py [--tasks 2000] [--docs 100] [--trials 2]

No-op tasks: one Celery worker, prefork -c 2, on a fresh redis-server with the platform's
config; one producer publishes --tasks no-op tasks while the worker drains them. Reported: the
producer's enqueue rate and tasks completed per second (first publish to empty queue), the
median of --trials trials, and the ratio to vanilla Celery (every setting at its default, on
the same Redis config with appendfsync everysec, Redis's own default).

Documents: the same worker plus uvicorn with 2 web workers; 4 logged-in clients POST
--docs documents to /api/documents/ (0 s of simulated work each); reported: 202 answers per
second and documents done per second (first submit to last done).

The platform's configurations vary appendfsync (always, everysec), task events (on; off;
off with a real Flower started as the platform starts it, ``manage.py flower``, either with
nobody viewing it or watched: a viewer polls its API every second as its dashboard does, so it
switches events on in the workers, apps/ops/flower_gate.py) and SQLite synchronous (FULL,
NORMAL; WAL mode). Trials are interleaved (every configuration once, then
again) so a load spike from other work on the machine spreads over all of them. Writes
loadtests/results/throughput_comparison.{json,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tests.procs  # noqa: E402
from celery_conf.policy import queue_lists  # noqa: E402
from loadtests.common import new_figure, progress, save_figure, save_json  # noqa: E402
from tests.procs import (  # noqa: E402
    BIN,
    Client,
    Proc,
    Stack,
    free_port,
    make_template_db,
    spawn,
    wait_until,
)

SUBMITTERS = 4  # concurrent logged-in clients posting documents


@dataclass(frozen=True)
class Config:
    name: str
    app: str  # "vanilla" or "platform"
    appendfsync: str
    # "on", "off", "flower" (off, Flower running and watched) or "flower-idle" (off, Flower
    # running, nobody viewing)
    events: str = "off"
    sqlite: str = "FULL"
    # The platform's workers log at INFO (platform/supervisord.conf); Celery's CLI default,
    # vanilla's, is WARNING. INFO writes two lines per task.
    loglevel: str = "INFO"

    @property
    def label(self) -> str:
        if self.app == "vanilla":
            return "vanilla Celery"
        events = {"on": "events on", "off": "events off", "flower": "Flower watching",
                  "flower-idle": "Flower running, nobody viewing"}
        log = "" if self.loglevel == "INFO" else f", log {self.loglevel}"
        return f"{self.appendfsync}, {events[self.events]}, sqlite {self.sqlite}{log}"


NOOP_CONFIGS = (
    Config("vanilla", "vanilla", "everysec", loglevel="WARNING"),
    Config("always-events", "platform", "always", "on", "NORMAL"),  # shipped before adr/0014
    Config("always-off", "platform", "always", "off"),
    Config("always-flower", "platform", "always", "flower"),
    Config("everysec-events", "platform", "everysec", "on"),
    Config("everysec-off", "platform", "everysec", "off"),
    Config("everysec-flower", "platform", "everysec", "flower"),
    Config("everysec-flower-idle", "platform", "everysec", "flower-idle"),
    Config("everysec-off-warning", "platform", "everysec", "off", loglevel="WARNING"),
)
DOC_CONFIGS = (
    Config("always-events-normal", "platform", "always", "on", "NORMAL"),  # shipped before
    Config("always-off-full", "platform", "always", "off", "FULL"),
    Config("everysec-off-normal", "platform", "everysec", "off", "NORMAL"),
    Config("everysec-off-full", "platform", "everysec", "off", "FULL"),
    Config("everysec-flower-full", "platform", "everysec", "flower", "FULL"),
    Config("everysec-flower-idle-full", "platform", "everysec", "flower-idle", "FULL"),
)


# --- the producer, run in its own process so it loads exactly one configuration --------------
def produce(app_kind: str, count: int, *, sent_events: bool) -> None:
    """Publish ``count`` no-op tasks; print the first publish's wall time and the rate."""
    if app_kind == "vanilla":
        from loadtests.vanilla_celery import app
    else:
        from celery_conf import app
    if sent_events:  # the producer's half of "events on", as shipped before adr/0014
        app.conf.task_send_sent_event = True
    app.send_task("loadtests.noop")  # connect and declare before timing
    started_wall, started = time.time(), time.perf_counter()
    for _ in range(count):
        app.send_task("loadtests.noop")
    elapsed = time.perf_counter() - started
    print(json.dumps({"started": started_wall, "ended": time.time(),
                      "enqueue_per_s": count / elapsed}))


def run_producer(stack: Stack, config: Config, count: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--produce", config.app, "--tasks", str(count)]
        + (["--sent-events"] if config.events == "on" else []),
        cwd=tests.procs.ROOT, env=env_for(stack, config), capture_output=True, text=True,
        timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"producer failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- processes ---------------------------------------------------------------------------------
def env_for(stack: Stack, config: Config) -> dict[str, str]:
    env = dict(stack.env)
    if config.app == "vanilla":
        # Celery's Django fix-up switches on when DJANGO_SETTINGS_MODULE is set: vanilla has
        # no Django at all.
        env.pop("DJANGO_SETTINGS_MODULE", None)
        env["VANILLA_BROKER_URL"] = stack.redis.url
    return env


def new_stack(work: Path, template: Path, config: Config, trial: int) -> Stack:
    return Stack(
        base_dir=work / f"{config.name}-{trial}", template_db=template,
        env_overrides={
            "DOCUMENTS_PROCESSING_SECONDS": "0",
            "METERING_DAILY_LIMIT": "100000000",
            "SQLITE_SYNCHRONOUS": config.sqlite,
            "FLOWER_UNAUTHENTICATED_API": "true",  # loopback, benchmark only
        },
        redis_overrides={"appendfsync": config.appendfsync})


def start_worker(stack: Stack, config: Config) -> Proc:
    app = "loadtests.vanilla_celery" if config.app == "vanilla" else "celery_conf"
    argv = [str(BIN / "celery"), "-A", app, "worker", "-n", f"bench-{config.name}@%h",
            "-c", "2", "--loglevel", config.loglevel]
    if config.app == "platform":
        argv += ["-I", "loadtests.bench_tasks", "-Q", "default,documents,reports"]
    if config.events == "on":  # the worker's half: Celery's own switch for task events
        argv.append("-E")
    proc = spawn("worker", argv, env=env_for(stack, config), log_dir=stack.log_dir)
    stack.procs.append(proc)
    return proc  # ready once warm_up's probe task has run


def start_flower(stack: Stack, config: Config) -> str | None:
    """Flower as platform/supervisord.conf runs it, for the Flower configurations."""
    if config.events not in ("flower", "flower-idle"):
        return None
    port = free_port()
    # The checkout the Stack runs now (loadtests/ceiling.py code_at), read at each start.
    proc = spawn("flower", [sys.executable, str(tests.procs.ROOT / "manage.py"), "flower",
                            "--address", "127.0.0.1", "--port", str(port)],
                 env=env_for(stack, config), log_dir=stack.log_dir)
    stack.procs.append(proc)
    base = f"http://127.0.0.1:{port}"
    import requests

    wait_until(lambda: requests.get(base + "/healthcheck", timeout=2).ok, timeout=60,
               what="flower answers")
    return base


class Viewer(threading.Thread):
    """Someone with Flower's dashboard open: it fetches /api/workers every second."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.base = base
        self.stopped = threading.Event()

    def run(self) -> None:
        import requests

        while not self.stopped.wait(1.0):
            try:
                requests.get(self.base + "/api/workers", timeout=10)
            except requests.RequestException:
                pass  # Flower busy: the next poll counts as well

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=15)


def watch(flower: str | None, config: Config) -> Viewer | None:
    if flower is None or config.events != "flower":
        return None
    viewer = Viewer(flower)
    viewer.start()
    return viewer


def flower_tasks(base: str) -> int:
    import requests

    return len(requests.get(base + "/api/tasks", params={"limit": 1_000_000}, timeout=30).json())


def wait_drained(stack: Stack, config: Config, *, what: str, timeout: float = 600) -> float:
    """Wall time at which the queue and the in-flight hash were first seen empty."""
    client = stack.redis.client()
    lists = queue_lists("celery" if config.app == "vanilla" else "default")
    deadline = time.monotonic() + timeout
    while sum(client.llen(key) for key in lists) + client.hlen("unacked") > 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not drained in {timeout} s")
        time.sleep(0.005)
    return time.time()


def warm_up(stack: Stack, config: Config, flower: str | None) -> None:
    """One task through the worker; with Flower, until Flower has switched events on."""
    def probe() -> bool:
        run_producer(stack, config, 1)
        wait_drained(stack, config, what="probe (worker starting)", timeout=90)
        return flower is None or flower_tasks(flower) > 0

    wait_until(probe, timeout=90, what="a probe task seen end to end", interval=1)


# --- trials ------------------------------------------------------------------------------------
def noop_trial(work: Path, template: Path, config: Config, trial: int, tasks: int) -> dict:
    stack = new_stack(work, template, config, trial)
    try:
        flower = start_flower(stack, config)
        viewer = watch(flower, config)
        start_worker(stack, config)
        warm_up(stack, config, flower if viewer else None)
        seen_before = flower_tasks(flower) if viewer else 0
        watcher = EmptyWatcher(stack, config)
        watcher.start()
        produced = run_producer(stack, config, tasks)
        end = watcher.first_empty_after(produced["ended"])
        row = {"enqueue_per_s": produced["enqueue_per_s"],
               "tasks_per_s": tasks / (end - produced["started"])}
        if viewer:
            row["flower_tasks_seen"] = wait_flower_count(flower, seen_before + tasks) - seen_before
            viewer.stop()
        elif flower:  # nobody viewed: one look afterwards (tasks seen while nobody looked)
            row["flower_tasks_seen"] = flower_tasks(flower)
        return row
    finally:
        stack.stop()


class EmptyWatcher(threading.Thread):
    """Samples the queue every few ms from before the first publish, noting when it is empty.

    The drain ends at the first empty sample after the producer's last publish: measured
    beside the producer, not after its process exits.
    """

    def __init__(self, stack: Stack, config: Config) -> None:
        super().__init__(daemon=True)
        self.client = stack.redis.client()
        # Every priority step's list (the vanilla app's extra one stays empty).
        self.lists = queue_lists("celery" if config.app == "vanilla" else "default")
        self.empty_at: list[float] = []
        self.stop_after: float | None = None

    def run(self) -> None:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            now = time.time()
            if sum(self.client.llen(key) for key in self.lists) + self.client.hlen("unacked") == 0:
                self.empty_at.append(now)
                if self.stop_after is not None and now >= self.stop_after:
                    return
            time.sleep(0.003)

    def first_empty_after(self, ended: float) -> float:
        self.stop_after = ended
        self.join(timeout=900)
        after = [t for t in self.empty_at if t >= ended]
        if not after:
            raise TimeoutError("the worker did not drain the queue")
        return after[0]


def wait_flower_count(base: str, want: int) -> int:
    deadline = time.monotonic() + 30
    seen = flower_tasks(base)
    while seen < want and time.monotonic() < deadline:
        time.sleep(0.5)
        seen = flower_tasks(base)
    return seen


def docs_trial(work: Path, template: Path, config: Config, trial: int, docs: int) -> dict:
    stack = new_stack(work, template, config, trial)
    try:
        flower = start_flower(stack, config)
        viewer = watch(flower, config)
        start_worker(stack, config)
        web = stack.start_web(workers=2)
        clients = [Client.login(web.base, "tester", "tester-password-1")
                   for _ in range(SUBMITTERS)]
        finished_sql = ("SELECT COUNT(*) AS n FROM documents_document "
                        "WHERE state IN ('done', 'failed')")
        probes = 0

        def probe() -> bool:
            # One document end to end; with Flower, until Flower has switched events on.
            nonlocal probes
            clients[0].submit("probe document", title="probe")
            probes += 1
            wait_until(lambda: stack.query(finished_sql)[0]["n"] >= probes, timeout=90,
                       what="probe document done")
            return viewer is None or flower_tasks(flower) > 0

        wait_until(probe, timeout=120, what="a probe document seen end to end", interval=1)
        seen_before = flower_tasks(flower) if viewer else 0
        per_client = [docs // SUBMITTERS + (i < docs % SUBMITTERS) for i in range(SUBMITTERS)]
        finished: list[float] = []

        def submit(client: Client, count: int) -> None:
            for i in range(count):
                client.submit(f"benchmark document {i} " * 20, title=f"bench {i}")
            finished.append(time.time())

        started = time.time()
        threads = [threading.Thread(target=submit, args=(c, n))
                   for c, n in zip(clients, per_client, strict=True)]
        for t in threads:
            t.start()
        total = docs + probes

        def all_done() -> bool:
            return stack.query(finished_sql)[0]["n"] >= total

        wait_until(all_done, timeout=600, what=f"{docs} documents done", interval=0.02)
        ended = time.time()
        for t in threads:
            t.join()
        failed = stack.query("SELECT COUNT(*) AS n FROM documents_document "
                             "WHERE state = 'failed'")[0]["n"]
        row = {"submit_per_s": docs / (max(finished) - started),
               "docs_per_s": docs / (ended - started), "failed": failed}
        if viewer:
            row["flower_tasks_seen"] = (
                wait_flower_count(flower, seen_before + docs) - seen_before)
            viewer.stop()
        elif flower:
            row["flower_tasks_seen"] = flower_tasks(flower)
        return row
    finally:
        stack.stop()


def median_rows(config: Config, trials: list[dict]) -> dict:
    keys = [k for k in trials[0] if isinstance(trials[0][k], (int, float))]
    return {**asdict(config), "label": config.label, "trials": trials,
            **{k: statistics.median(t[k] for t in trials) for k in keys}}


def plot(noop: list[dict], docs: list[dict], name: str) -> Path:
    fig, (left, right) = new_figure(
        "Throughput vs vanilla Celery (prefork -c 2, one 2-core machine, shared and loaded)",
        ncols=2)
    if noop:
        vanilla = next((r["tasks_per_s"] for r in noop if r["app"] == "vanilla"), None)
        names = [r["label"].replace(", sqlite FULL", "").replace(", sqlite NORMAL", "")
                 for r in noop]
        colors = ["#6c757d" if r["app"] == "vanilla" else "#457b9d" for r in noop]
        left.barh(names, [r["tasks_per_s"] for r in noop], color=colors)
        if vanilla:
            left.axvline(0.8 * vanilla, color="#e63946", linestyle="--", label="0.8 x vanilla")
            for i, r in enumerate(noop):
                left.text(r["tasks_per_s"], i, f" {r['tasks_per_s'] / vanilla:.2f}x",
                          va="center", fontsize=8)
            left.legend(loc="lower right", fontsize=8)
        left.set_xlabel("no-op tasks per second (median)")
        left.invert_yaxis()
    if docs:
        names = [r["label"] for r in docs]
        y = range(len(docs))
        right.barh([i - 0.2 for i in y], [r["submit_per_s"] for r in docs], height=0.4,
                   color="#2a9d8f", label="202 answers/s")
        right.barh([i + 0.2 for i in y], [r["docs_per_s"] for r in docs], height=0.4,
                   color="#e76f51", label="documents done/s")
        right.set_yticks(list(y), names)
        right.set_xlabel("documents per second (median)")
        right.legend(loc="lower right", fontsize=8)
        right.invert_yaxis()
    return save_figure(fig, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000, help="no-op tasks per trial")
    parser.add_argument("--docs", type=int, default=100, help="documents per trial")
    parser.add_argument("--trials", type=int, default=2, help="trials per configuration")
    parser.add_argument("--skip", choices=("noop", "docs"), help="leave one half out")
    parser.add_argument("--only", default="",
                        help="comma-separated configuration names to run (default: all)")
    parser.add_argument("--output", default="throughput_comparison",
                        help="name of the JSON and PNG under loadtests/results/")
    parser.add_argument("--produce", choices=("vanilla", "platform"), help=argparse.SUPPRESS)
    parser.add_argument("--sent-events", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.produce:
        produce(args.produce, args.tasks, sent_events=args.sent_events)
        return
    if args.tasks < 1 or args.docs < SUBMITTERS or args.trials < 1:
        parser.error(f"--tasks and --trials must be >= 1 and --docs >= {SUBMITTERS}")
    # SIGTERM or SIGINT (which a background job of a script ignores) stops everything started.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(1))
    work = Path(tempfile.mkdtemp(prefix="throughput-"))
    template = make_template_db(work / "template")
    only = {n for n in args.only.split(",") if n}
    unknown = only - {c.name for c in NOOP_CONFIGS + DOC_CONFIGS}
    if unknown:
        parser.error(f"unknown configuration(s): {', '.join(sorted(unknown))}")
    noop_configs = () if args.skip == "noop" else tuple(
        c for c in NOOP_CONFIGS if not only or c.name in only)
    doc_configs = () if args.skip == "docs" else tuple(
        c for c in DOC_CONFIGS if not only or c.name in only)
    noop_trials: dict[str, list[dict]] = {c.name: [] for c in noop_configs}
    doc_trials: dict[str, list[dict]] = {c.name: [] for c in doc_configs}
    for trial in range(1, args.trials + 1):
        for config in noop_configs:
            progress(f"trial {trial}/{args.trials} no-op  {config.label}: {args.tasks} tasks")
            row = noop_trial(work, template, config, trial, args.tasks)
            noop_trials[config.name].append(row)
            progress(f"  {', '.join(f'{k} {v:,.0f}' for k, v in row.items())}")
        for config in doc_configs:
            progress(f"trial {trial}/{args.trials} docs   {config.label}: {args.docs} documents")
            row = docs_trial(work, template, config, trial, args.docs)
            doc_trials[config.name].append(row)
            progress(f"  {', '.join(f'{k} {v:,.1f}' for k, v in row.items())}")
    noop = [median_rows(c, noop_trials[c.name]) for c in noop_configs]
    docs = [median_rows(c, doc_trials[c.name]) for c in doc_configs]
    vanilla = next((r for r in noop if r["app"] == "vanilla"), None)
    head = f"no-op tasks (median of {args.trials})"
    print(f"\n{head:<56}{'tasks/s':>9}{'x van.':>8}"
          f"{'enqueue/s':>11}{'x van.':>8}")
    for r in noop:
        if vanilla:
            r["ratio_tasks"] = r["tasks_per_s"] / vanilla["tasks_per_s"]
            r["ratio_enqueue"] = r["enqueue_per_s"] / vanilla["enqueue_per_s"]
        print(f"{r['label']:<56}{r['tasks_per_s']:>9,.0f}{r.get('ratio_tasks', 0):>8.2f}"
              f"{r['enqueue_per_s']:>11,.0f}{r.get('ratio_enqueue', 0):>8.2f}"
              + (f"   Flower saw {r['flower_tasks_seen']:,.0f}" if "flower_tasks_seen" in r
                 else ""))
    head = f"documents (median of {args.trials})"
    print(f"\n{head:<56}{'202/s':>9}{'done/s':>9}")
    for r in docs:
        print(f"{r['label']:<56}{r['submit_per_s']:>9,.1f}{r['docs_per_s']:>9,.1f}")
    info = {"cores": os.cpu_count(), "tasks": args.tasks, "docs": args.docs,
            "trials": args.trials, "submitters": SUBMITTERS, "worker": "prefork -c 2",
            "note": "one run on one shared, loaded 2-core machine",
            "noop": noop, "documents": docs}
    print(f"\nwrote {save_json(args.output, info)}")
    print(f"wrote {plot(noop, docs, args.output)}")


if __name__ == "__main__":
    main()
