"""The platform's key figures against a baseline kept in the repository, with their noise.

    .venv/bin/python -m loadtests.baseline [--config single|full|single,full] [--trials 5]
        [--write] [--against single]
    .venv/bin/python -m loadtests.baseline --report [--db postgres]  # stored full vs single
    .venv/bin/python -m loadtests.baseline --config full --before DIR  # this code vs DIR's

Each trial starts a fresh platform of the chosen configuration on real processes (tests/procs.py)
and measures, with the shipped settings:

- document throughput: documents done per second, --docs submitted by 4 clients through the web
  workers with DOCUMENTS_PROCESSING_SECONDS=0 (first submit to last done), the platform's CPU
  per document over that run (every process of the Stack and Redis, from /proc and INFO cpu:
  barely moved by other load on the machine, unlike the wall-clock figures), the same
  processes' CPU over 5 s with nothing to do (before the run), and the 202 latency p50 / p99
  of those submissions;
- redelivery: a worker running a document (a 4 s canary) is SIGKILLed with its pool and started
  again at once, as the supervisor does; seconds from the kill until the document starts again;
- beat handover: the leading beat is SIGKILLed and a replacement started; seconds from the kill
  until a beat holds the lock again;
- event fan-out: 100 SSE connections, 20 broadcasts/s for 3 s; publish-to-client latency p50 /
  p99 (loadtests/sse_fanout.py's clients and publisher).

Configurations: ``single`` is the product before the retrofit (1 web worker, 1 Celery worker
process -c 1, 1 beat); ``full`` is the platform as shipped (2 web workers, 2 Celery workers -c 2,
2 beats, Flower running with nobody viewing). --db postgres runs either on PostgreSQL
(tests/pgserver.py); those baselines are stored as ``single-postgres`` and ``full-postgres``.

--trials repeats give each figure's run-to-run noise (its trials' relative standard deviation,
on a log scale). With --write the figures, trials, noise, the machine and its load average go
to loadtests/baseline.json under the configuration's name. Without it each figure is printed
as a ratio to the stored baseline and flagged REGRESSED when its median is worse by more than
``NOISE_SIGMAS`` standard errors of the difference of the two medians (see ``threshold``); the exit
status is 1 if any figure regressed, 2 for a usage error. A plot of the ratios goes to
loadtests/results/baseline_<config>.png. How busy the machine was is stored with the figures.

--before DIR names another checkout of the platform (the code before a change, e.g. from
``git archive``): each trial is run from DIR and from this checkout back to back, and this
code's figures are compared with DIR's by the same rule instead of with the stored baseline
(plot: loadtests/results/baseline_<config>_vs_before.png; nothing is stored).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import signal
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.ceiling import ENV as THROUGHPUT_ENV  # noqa: E402
from loadtests.ceiling import (  # noqa: E402
    SUBMITTERS,
    WEB_ARGS,  # noqa: E402
    submit_all,
)
from loadtests.common import (  # noqa: E402
    load_note,
    new_figure,
    progress,
    save_figure,
    summary,
)

BASELINE = Path(__file__).resolve().parent / "baseline.json"
# A figure regresses when its median is worse than the baseline's by more than this many
# standard errors of the difference of the two medians: about a one-sided 0.1 % chance for
# normal noise.
NOISE_SIGMAS = 3.0
# Floor on each run's relative noise: three trials can agree by chance, and a threshold of
# zero would flag a 1 % move on a shared machine.
MIN_NOISE = 0.03
KILL_WORK_S = 4  # the canary document's work: long enough to be running when the kill lands
IDLE_WINDOW_S = 5.0  # how long the platform's idle CPU is measured
FANOUT_CLIENTS = 100
FANOUT_RATE = 20.0
FANOUT_SECONDS = 3.0
FINISHED_SQL = "SELECT COUNT(*) AS n FROM documents_document WHERE state IN ('done', 'failed')"


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    higher_is_better: bool


FIGURES = (
    Figure("docs_per_s", "document throughput", "docs/s", True),
    Figure("cpu_ms_per_doc", "platform CPU per document", "ms", False),
    Figure("idle_cpu_pct", "platform CPU while idle", "% core", False),
    Figure("latency_p50_ms", "202 latency p50", "ms", False),
    Figure("latency_p99_ms", "202 latency p99", "ms", False),
    Figure("redelivery_s", "redelivery after worker SIGKILL", "s", False),
    Figure("handover_s", "beat handover after leader SIGKILL", "s", False),
    Figure("fanout_p50_ms", "event fan-out latency p50", "ms", False),
    Figure("fanout_p99_ms", "event fan-out latency p99", "ms", False),
)


@dataclass(frozen=True)
class Shape:
    web_workers: int
    celery_workers: int
    concurrency: int
    beats: int
    flower: bool


CONFIGS = {
    "single": Shape(web_workers=1, celery_workers=1, concurrency=1, beats=1, flower=False),
    "full": Shape(web_workers=2, celery_workers=2, concurrency=2, beats=2, flower=True),
}


# --- one trial -----------------------------------------------------------------------------
def stored_name(config: str, db: str) -> str:
    """The key of a configuration's baseline: ``full``, or ``full-postgres`` on PostgreSQL."""
    return config if db == "sqlite" else f"{config}-{db}"


def run_trial(work: Path, template: Path, config: str, trial: int, docs: int,
              pg: Any = None, tag: str = "") -> dict[str, float]:
    from loadtests.throughput_comparison import Config, start_flower
    from tests.procs import Stack, wait_until
    from tests.scheduler.beats import leader_proc, wait_leader

    shape = CONFIGS[config]
    stack = Stack(base_dir=work / f"{config}-{trial}{tag}", template_db=template,
                  env_overrides={**THROUGHPUT_ENV, "FLOWER_UNAUTHENTICATED_API": "true"},
                  postgres=pg)
    try:
        if shape.flower:  # as shipped: running, nobody viewing (events stay off, adr/0022)
            start_flower(stack, Config("flower", "platform", "everysec", "flower-idle"))
        workers = {f"w{i}": stack.start_worker(f"w{i}", concurrency=shape.concurrency)
                   for i in range(1, shape.celery_workers + 1)}
        beats = [stack.start_elected_beat(f"b{i}") for i in range(1, shape.beats + 1)]
        web = stack.start_web(workers=shape.web_workers, uvicorn_args=WEB_ARGS)
        clients = [web.session() for _ in range(SUBMITTERS)]
        finished = lambda: int(stack.query(FINISHED_SQL)[0]["n"])  # noqa: E731
        row: dict[str, float] = {"load_average_1m": os.getloadavg()[0]}

        # Throughput and 202 latency, after a warm-up through every process.
        submit_all(clients, 8, "warm-up")
        wait_until(lambda: finished() >= 8, timeout=120, what="warm-up done")
        # What the platform spends with nothing to do (heartbeats, lease renewals, beat ticks,
        # Flower): it lands in the CPU per document too, in proportion to the run's length.
        idle_from = platform_cpu(stack)
        time.sleep(IDLE_WINDOW_S)  # the measurement window, not synchronisation
        row["idle_cpu_pct"] = 100 * (platform_cpu(stack) - idle_from) / IDLE_WINDOW_S
        cpu_before = platform_cpu(stack)
        latencies, first, _ = submit_all(clients, docs, "baseline")
        wait_until(lambda: finished() >= 8 + docs, timeout=600, interval=0.02,
                   what=f"{docs} documents done")
        row["docs_per_s"] = docs / (time.monotonic() - first)
        # CPU, unlike wall time, hardly moves with the other work on a shared machine.
        row["cpu_ms_per_doc"] = 1000 * (platform_cpu(stack) - cpu_before) / docs
        lat = summary(latencies)
        row["latency_p50_ms"], row["latency_p99_ms"] = lat["p50"] * 1000, lat["p99"] * 1000
        progress(f"{config} trial {trial}: {row['docs_per_s']:.1f} docs/s, "
                 f"{row['cpu_ms_per_doc']:.1f} ms CPU/doc (idle {row['idle_cpu_pct']:.1f} %), "
                 f"202 p50 "
                 f"{row['latency_p50_ms']:.0f} ms p99 {row['latency_p99_ms']:.0f} ms")

        # Kill a worker running a document; while its redelivery is pending (one visibility
        # timeout), kill the leading beat and measure the fan-out.
        victim = clients[0].submit(f"#!canary:work-seconds={KILL_WORK_S}\nredelivery probe",
                                   title="redelivery probe")
        running = wait_until(lambda: stack.query(
            "SELECT worker FROM documents_documentrun WHERE document_id = ? AND "
            "outcome = 'running'", victim), timeout=60, what="the probe document runs")
        name = running[0]["worker"].split("@")[0]
        workers[name].signal(signal.SIGKILL, group=True)
        killed_at = time.monotonic()
        workers[name].wait_exit(timeout=10)
        workers[name] = stack.start_worker(name, concurrency=shape.concurrency, wait=False)

        token, _ = wait_leader(stack, timeout=60)
        leader = leader_proc(beats, token)
        leader.signal(signal.SIGKILL, group=True)
        beat_killed = time.time()
        leader.wait_exit(timeout=10)
        beats.append(stack.start_elected_beat(f"b{len(beats) + 1}"))
        _, since = wait_leader(stack, other_than=token, timeout=60)
        row["handover_s"] = since - beat_killed
        progress(f"{config} trial {trial}: beat handover {row['handover_s']:.2f} s")

        row.update(fanout(stack, web.base, clients[0]))
        progress(f"{config} trial {trial}: fan-out p50 {row['fanout_p50_ms']:.1f} ms, "
                 f"p99 {row['fanout_p99_ms']:.1f} ms")

        wait_until(lambda: len(stack.query(
            "SELECT 1 FROM documents_documentrun WHERE document_id = ?", victim)) >= 2,
            timeout=180, interval=0.1, what="the killed worker's document starts again")
        row["redelivery_s"] = time.monotonic() - killed_at
        progress(f"{config} trial {trial}: redelivery {row['redelivery_s']:.1f} s")
        wait_until(lambda: stack.query(
            "SELECT state FROM documents_document WHERE id = ?", victim)[0]["state"] == "done",
            timeout=60, what="the redelivered document done")
        return row
    finally:
        stack.stop()


def platform_cpu(stack: Any) -> float:
    """CPU seconds of every platform process of the Stack (Redis included), so far."""
    from loadtests.costs import redis_counters, tree_cpu

    return (tree_cpu([p.pid for p in stack.procs])
            + redis_counters(stack.redis.client())["cpu_s"])


def fanout(stack: Any, base: str, client: Any) -> dict[str, float]:
    from loadtests.sse_fanout import measure_system

    cookie = "; ".join(f"{k}={v}" for k, v in client.http.cookies.items())
    result = asyncio.run(measure_system(
        "event bus", base + "/api/notifications/stream/", {"Cookie": cookie},
        ["publish-product"], FANOUT_CLIENTS, [FANOUT_RATE], FANOUT_SECONDS, stack.env, 1))
    phase = result["phases"][0]
    if phase["delivered"] < phase["expected"]:
        raise AssertionError(f"fan-out lost events: {phase['delivered']}/{phase['expected']}")
    return {"fanout_p50_ms": phase["p50_ms"], "fanout_p99_ms": phase["p99_ms"]}


# --- noise, ratios, verdicts -------------------------------------------------------------------
def noise(trials: list[float]) -> float:
    """Relative run-to-run noise: the standard deviation of the trials' logarithms."""
    logs = [math.log(t) for t in trials if t > 0]
    return statistics.stdev(logs) if len(logs) >= 2 else float("nan")


def figures_of(trials: list[dict[str, float]]) -> dict[str, dict[str, Any]]:
    out = {}
    for fig in FIGURES:
        values = [t[fig.key] for t in trials]
        out[fig.key] = {"median": statistics.median(values), "trials": values,
                        "noise": noise(values), "unit": fig.unit}
    return out


# The standard error of a median of n normal samples is about sqrt(pi / 2) = 1.2533 times
# that of their mean, sigma / sqrt(n).
MEDIAN_SE = math.sqrt(math.pi / 2)


def threshold(baseline: dict[str, Any], current: dict[str, Any]) -> float:
    """How much worse (as a log ratio) a figure's median may be before it counts as regressed.

    NOISE_SIGMAS standard errors of the difference of the two medians: each side's noise
    (at least MIN_NOISE) over the square root of its number of trials, so more trials narrow
    the band and a noisy machine widens it.
    """
    def se(figure: dict[str, Any]) -> float:
        n = max(len(figure["trials"]), 1)
        return MEDIAN_SE * max(_finite(figure["noise"]), MIN_NOISE) / math.sqrt(n)

    return NOISE_SIGMAS * math.hypot(se(baseline), se(current))


def compare(baseline: dict[str, Any], current: dict[str, Any]) -> list[dict[str, Any]]:
    """Each figure's ratio to the baseline, its threshold, and whether it regressed.

    Worse means lower for a rate and higher for a latency, a delay or a cost.
    """
    rows = []
    for fig in FIGURES:
        if fig.key not in baseline or fig.key not in current:
            continue  # a figure added after that baseline was written: nothing to compare
        b, c = baseline[fig.key], current[fig.key]
        ratio = c["median"] / b["median"]
        worse = -math.log(ratio) if fig.higher_is_better else math.log(ratio)
        band = threshold(b, c)
        rows.append({"key": fig.key, "label": fig.label, "unit": fig.unit,
                     "baseline": b["median"], "current": c["median"], "ratio": ratio,
                     "threshold": math.exp(band) - 1, "worse_by": math.exp(worse) - 1,
                     "higher_is_better": fig.higher_is_better,
                     "regressed": worse > band, "improved": -worse > band})
    return rows


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 0.0


def print_comparison(rows: list[dict[str, Any]], title: str) -> None:
    print(f"\n{title}")
    print(f"{'figure':<38}{'baseline':>12}{'now':>12}{'ratio':>8}{'noise band':>12}  verdict")
    for r in rows:
        verdict = "REGRESSED" if r["regressed"] else "better" if r["improved"] else "same"
        arrow = "higher" if r["higher_is_better"] else "lower"
        print(f"{r['label'] + ' (' + r['unit'] + ')':<38}{r['baseline']:>12.2f}"
              f"{r['current']:>12.2f}{r['ratio']:>8.2f}{'±' + format(r['threshold'], '.0%'):>12}"
              f"  {verdict} ({arrow} is better)")


def plot(rows: list[dict[str, Any]], title: str, name: str) -> Path:
    fig, ax = new_figure(title)
    fig.set_size_inches(9, 4.5)  # room for the figures' names
    labels = [r["label"] for r in rows]
    ratios = [r["ratio"] for r in rows]
    colors = ["#e63946" if r["regressed"] else "#2a9d8f" if r["improved"] else "#457b9d"
              for r in rows]
    ax.barh(labels, ratios, color=colors)
    for i, r in enumerate(rows):
        # The noise band, on the side where the figure would be worse.
        band = 1 + r["threshold"]
        edge = 1 / band if r["higher_is_better"] else band
        ax.plot([edge, edge], [i - 0.4, i + 0.4], color="#222", linewidth=1)
        ax.text(r["ratio"], i, f" {r['ratio']:.2f}x", va="center", fontsize=8)
    ax.axvline(1.0, color="#999", linestyle="--")
    ax.set_xlabel("ratio to baseline (tick: where the noise band ends)")
    ax.invert_yaxis()
    return save_figure(fig, name)


def machine(load_1m: list[float]) -> dict[str, Any]:
    """The host, and how busy it was by the trials' own 1-minute load averages: measured, not
    assumed (a load average above the cores means the trials queued for a CPU)."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kb = 0
    return {"host": socket.gethostname(), "cpu": model, "cores": os.cpu_count(),
            "memory_gib": round(mem_kb / 2**20, 1), "kernel": platform.release(),
            "python": platform.python_version(),
            "note": load_note(load_1m)}


# --- command -------------------------------------------------------------------------------
def load_baseline() -> dict[str, Any]:
    return json.loads(BASELINE.read_text()) if BASELINE.exists() else {"configs": {}}


def report(stored: dict[str, Any], db: str = "sqlite") -> int:
    configs = stored["configs"]
    single, full = stored_name("single", db), stored_name("full", db)
    if not {single, full} <= configs.keys():
        print(f"--report needs {single} and {full} in loadtests/baseline.json", file=sys.stderr)
        return 2
    rows = compare(configs[single]["figures"], configs[full]["figures"])
    print_comparison(rows, f"{full} (as shipped) against {single} (before the retrofit), stored")
    title = (f"Full platform vs single worker, {db} "
             f"({configs[full].get('machine', {}).get('note', 'load not stored')})")
    print(f"wrote {plot(rows, title, f'baseline_full_vs_single_{db}')}")
    return 1 if any(r["regressed"] for r in rows) else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="full",
                        help="single, full, or both as single,full (trials interleaved)")
    parser.add_argument("--trials", type=int, default=5, help="repeats, for the noise (>= 2)")
    parser.add_argument("--docs", type=int, default=300, help="documents per throughput trial")
    parser.add_argument("--write", action="store_true",
                        help="store this run as the configuration's baseline")
    parser.add_argument("--against", choices=sorted(CONFIGS),
                        help="compare with another configuration's stored baseline")
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite",
                        help="the database the platform runs on (PostgreSQL: tests/pgserver.py)")
    parser.add_argument("--report", action="store_true",
                        help="compare the stored full baseline with the stored single one")
    parser.add_argument("--before", type=Path,
                        help="another checkout: run every trial from it too and compare")
    args = parser.parse_args()
    stored = load_baseline()
    if args.report:
        return report(stored, args.db)
    configs = [c for c in args.config.split(",") if c]
    if not configs or set(configs) - CONFIGS.keys() or len(set(configs)) != len(configs):
        parser.error(f"--config takes {' or '.join(sorted(CONFIGS))}, or both comma-separated")
    if args.trials < 2 or args.docs < SUBMITTERS:
        parser.error(f"--trials must be >= 2 (noise needs repeats) and --docs >= {SUBMITTERS}")
    if args.against and len(configs) > 1:
        parser.error("--against compares one configuration")
    if args.before is not None:
        if args.write or args.against or not (args.before / "manage.py").is_file():
            parser.error("--before takes a checkout of the platform, without --write/--against")
        return compare_code(args, configs, args.before.resolve())
    if not args.write:
        for config in configs:
            name = stored_name(args.against or config, args.db)
            if name not in stored["configs"]:
                parser.error(f"no stored baseline for {name!r}: run with --write first")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(1))

    from tests.procs import make_template_db

    work = Path(tempfile.mkdtemp(prefix="baseline-"))
    template = make_template_db(work / "template")
    pg = None
    if args.db == "postgres":
        from tests.pgserver import make_template_pg

        pg = make_template_pg(work / "pg")
    load_before = os.getloadavg()
    trials: dict[str, list[dict[str, float]]] = {c: [] for c in configs}
    # Interleaved (every configuration once, then again): a load spike from other work on
    # the machine spreads over all of them instead of landing on one.
    try:
        for trial in range(1, args.trials + 1):
            for config in configs:
                progress(f"{config} ({args.db}): trial {trial}/{args.trials}")
                trials[config].append(run_trial(work, template, config, trial, args.docs, pg))
    finally:
        if pg is not None:
            pg.server.stop()
    load_after = os.getloadavg()
    status = 0
    for config in configs:
        current = {
            "config": config, "db": args.db, "shape": CONFIGS[config].__dict__,
            "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "trials": args.trials, "docs": args.docs, "interleaved_with": configs,
            "machine": machine([t["load_average_1m"] for t in trials[config]]),
            "load_average_before": load_before,
            "load_average_after": load_after,
            "load_average_1m_per_trial": [t["load_average_1m"] for t in trials[config]],
            "figures": figures_of(trials[config]),
        }
        print(f"\n{config}: median of {args.trials} trials (noise = relative std dev)")
        for fig in FIGURES:
            f = current["figures"][fig.key]
            print(f"  {fig.label:<38}{f['median']:>10.2f} {fig.unit:<7} noise {f['noise']:.1%}")
        name = stored_name(config, args.db)
        against = stored_name(args.against or config, args.db)
        if against in stored["configs"]:
            rows = compare(stored["configs"][against]["figures"], current["figures"])
            title = f"{name} now against the stored {against} baseline"
            print_comparison(rows, title)
            png = plot(rows, f"{title} ({current['machine']['note']})", f"baseline_{name}")
            print(f"wrote {png}")
            status = max(status, 1 if any(r["regressed"] for r in rows) else 0)
        if args.write:
            stored["configs"][name] = current
    if args.write:
        BASELINE.write_text(json.dumps(stored, indent=2) + "\n")
        print(f"wrote {BASELINE} ({', '.join(stored_name(c, args.db) for c in configs)})")
        return 0
    return status


def compare_code(args: argparse.Namespace, configs: list[str], before: Path) -> int:
    """Every trial from ``before`` and from this checkout, back to back; this vs that."""
    from loadtests.ceiling import code_at
    from tests.procs import ROOT, make_template_db

    work = Path(tempfile.mkdtemp(prefix="baseline-"))
    template = make_template_db(work / "template")
    pg = None
    if args.db == "postgres":
        from tests.pgserver import make_template_pg

        pg = make_template_pg(work / "pg")
    codes = {"before": before, "now": ROOT}
    trials: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        for trial in range(1, args.trials + 1):
            for config in configs:
                for code, root in codes.items():
                    progress(f"{config} ({args.db}), code {code}: trial {trial}/{args.trials}")
                    with code_at(root):
                        row = run_trial(work, template, f"{config}", trial, args.docs, pg,
                                        tag=f"-{code}")
                    trials.setdefault((config, code), []).append(row)
    finally:
        if pg is not None:
            pg.server.stop()
    status = 0
    for config in configs:
        figures = {code: figures_of(trials[(config, code)]) for code in codes}
        for code in codes:
            print(f"\n{config}, code {code}: median of {args.trials} trials")
            for fig in FIGURES:
                f = figures[code][fig.key]
                print(f"  {fig.label:<38}{f['median']:>10.2f} {fig.unit:<7} "
                      f"noise {f['noise']:.1%}  trials "
                      + " ".join(f"{t:.1f}" for t in f["trials"]))
        rows = compare(figures["before"], figures["now"])
        name = stored_name(config, args.db)
        title = f"{name}: this code against the code before ({before.name}), interleaved"
        print_comparison(rows, title)
        load = [t["load_average_1m"] for code in codes for t in trials[(config, code)]]
        png = plot(rows, f"{title} ({load_note(load)})", f"baseline_{name}_vs_before")
        print(f"wrote {png}")
        status = max(status, 1 if any(r["regressed"] for r in rows) else 0)
    return status


if __name__ == "__main__":
    sys.exit(main())
