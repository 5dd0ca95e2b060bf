"""What more Celery worker processes cost on a machine with fewer cores than processes.

    .venv/bin/python loadtests/process_width.py [--tasks 3000] [--workers 1,2,4] [--repeats 2]

Celery itself, without the platform's documents: --tasks no-op tasks are queued while the
worker processes are SIGSTOPped, then drained by 1, 2 and 4 worker processes (prefork -c 1
each: a main process and one pool process, as the platform ships them), for vanilla Celery
(every setting at its default) and for the platform's Celery app (its durable policy,
loadtests/bench_tasks.py's no-op). Per task: the CPU of every worker process (/proc), the
times a worker process was preempted (involuntary context switches), and tasks drained per
second. Runs are interleaved, so a load spike spreads over all of them.

What it answers (docs/benchmarks.md, "More worker processes"): whether the CPU a task costs
grows once processes outnumber cores, in Celery itself, whatever the tasks do. When it does,
a box whose cores are already busy (the web shares them) does less with more processes.
Writes loadtests/results/process_width.{json,png}.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common import (  # noqa: E402
    load_note,
    new_figure,
    progress,
    save_figure,
    save_json,
)
from loadtests.costs import tree_cpu  # noqa: E402
from loadtests.throughput_comparison import (  # noqa: E402
    Config,
    env_for,
    run_producer,
    wait_drained,
)
from tests.procs import BIN, Proc, Stack, make_template_db, spawn  # noqa: E402

CONFIGS = (
    Config("vanilla", "vanilla", "everysec", loglevel="WARNING"),
    Config("platform", "platform", "everysec", "off"),  # as shipped
)
WARM_UP_TASKS = 40


def start_workers(stack: Stack, config: Config, count: int) -> list[Proc]:
    app = "loadtests.vanilla_celery" if config.app == "vanilla" else "celery_conf"
    procs = []
    for i in range(1, count + 1):
        argv = [str(BIN / "celery"), "-A", app, "worker", "-n", f"w{i}@%h", "-c", "1",
                "--loglevel", config.loglevel]
        if config.app == "platform":
            argv += ["-I", "loadtests.bench_tasks", "-Q", "default,documents,reports"]
        proc = spawn(f"w{i}", argv, env=env_for(stack, config), log_dir=stack.log_dir)
        stack.procs.append(proc)
        procs.append(proc)
    return procs


def preemptions(procs: list[Proc]) -> int:
    """Involuntary context switches of every process of the workers' trees so far."""
    total = 0
    for proc in procs:
        top = psutil.Process(proc.pid)
        for p in [top, *top.children(recursive=True)]:
            total += p.num_ctx_switches().involuntary
    return total


def run_one(work: Path, template: Path, config: Config, count: int, tasks: int,
            tag: str) -> dict[str, Any]:
    stack = Stack(base_dir=work / f"{config.name}-{count}{tag}", template_db=template,
                  redis_overrides={"appendfsync": config.appendfsync})
    try:
        procs = start_workers(stack, config, count)
        # Until every pool process has run a few (a burst reaches them all).
        for _ in range(3):
            run_producer(stack, config, WARM_UP_TASKS)
            wait_drained(stack, config, what="warm-up tasks", timeout=120)
        for p in procs:
            p.signal(signal.SIGSTOP, group=True)
        run_producer(stack, config, tasks)
        cpu, switches = tree_cpu([p.pid for p in procs]), preemptions(procs)
        started = time.monotonic()
        for p in procs:
            p.signal(signal.SIGCONT, group=True)
        wait_drained(stack, config, what=f"{tasks} tasks drained", timeout=600)
        seconds = time.monotonic() - started
        row = {"app": config.name, "workers": count, "tasks": tasks,
               "tasks_per_s": tasks / seconds,
               "cpu_ms_per_task": 1000 * (tree_cpu([p.pid for p in procs]) - cpu) / tasks,
               "preemptions_per_task": (preemptions(procs) - switches) / tasks}
        row["cores_busy"] = row["cpu_ms_per_task"] * row["tasks_per_s"] / 1000
        progress(f"{config.name}, {count} worker process(es): {row['tasks_per_s']:.0f} tasks/s, "
                 f"{row['cpu_ms_per_task']:.3f} ms CPU per task, "
                 f"{row['preemptions_per_task']:.2f} preemptions per task")
        return row
    finally:
        stack.stop()


def medians(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for app in dict.fromkeys(r["app"] for r in rows):
        for count in sorted({r["workers"] for r in rows if r["app"] == app}):
            mine = [r for r in rows if r["app"] == app and r["workers"] == count]
            out.append({"app": app, "workers": count, "runs": len(mine), **{
                key: statistics.median(r[key] for r in mine)
                for key in ("tasks_per_s", "cpu_ms_per_task", "preemptions_per_task",
                            "cores_busy")}})
    return out


def plot(summary: list[dict[str, Any]], note: str, name: str) -> Path:
    fig, (left, right) = new_figure(
        f"No-op tasks drained by N Celery worker processes (-c 1), {os.cpu_count()} cores",
        ncols=2)
    for app, color in (("vanilla", "#6c757d"), ("platform", "#457b9d")):
        mine = [r for r in summary if r["app"] == app]
        xs = [r["workers"] for r in mine]
        left.plot(xs, [r["tasks_per_s"] for r in mine], "o-", color=color, label=app)
        right.plot(xs, [r["cpu_ms_per_task"] for r in mine], "o-", color=color, label=app)
    left.set_ylabel("tasks drained per second")
    right.set_ylabel("CPU per task, every worker process (ms)")
    for ax in (left, right):
        ax.set_xlabel("Celery worker processes (-c 1 each)")
        ax.set_xticks(sorted({r["workers"] for r in summary}))
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    left.text(0.02, 0.02, note, transform=left.transAxes, fontsize=7)
    return save_figure(fig, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000, help="no-op tasks per drain")
    parser.add_argument("--workers", default="1,2,4", help="worker process counts")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--output", default="process_width")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",") if n]
    if args.tasks < 1 or args.repeats < 1 or not counts or min(counts) < 1:
        parser.error("--tasks, --repeats and every worker count must be >= 1")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(1))
    work = Path(tempfile.mkdtemp(prefix="process-width-"))
    template = make_template_db(work / "template")
    loads = [os.getloadavg()[0]]
    rows = []
    for repeat in range(1, args.repeats + 1):
        for count in counts:
            for config in CONFIGS:
                rows.append(run_one(work, template, config, count, args.tasks, f"-{repeat}"))
    loads.append(os.getloadavg()[0])
    summary = medians(rows)
    note = load_note(loads)
    for r in summary:
        print(f"{r['app']:>8}, {r['workers']} process(es): {r['tasks_per_s']:6.0f} tasks/s, "
              f"{r['cpu_ms_per_task']:.3f} ms CPU per task, {r['preemptions_per_task']:.2f} "
              f"preemptions per task, {r['cores_busy']:.2f} cores busy")
    data = {"args": vars(args), "cores": os.cpu_count(), "machine": note,
            "summary": summary, "runs": rows}
    print(f"wrote {save_json(args.output, data)}")
    print(f"wrote {plot(summary, note, args.output)}")


if __name__ == "__main__":
    main()
