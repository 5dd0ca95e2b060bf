"""Run each kill test N times in a row beside two CPU-burning processes; report pass counts.

    .venv/bin/python loadtests/kill_tests_under_load.py [--runs 20] [--test NODEID ...]

The kill tests (tests/documents and tests/reports: SIGKILLed workers and pool children, a
worker killed while it holds the restore lock, a deploy's SIGTERM, a superseded copy's ack)
promise a bound on a 2-core machine that may be busy. Two processes spinning on the CPU for
the whole run make it busy on purpose. Each test runs in its own pytest process; a failure is
kept (its last output lines go to the JSON), never retried. Writes
loadtests/results/kill_tests_under_load.json and .png.
"""

from __future__ import annotations

import argparse
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common import new_figure, progress, save_figure, save_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KILL_TESTS = [
    "tests/documents/test_durability.py::"
    "test_sigkill_worker_mid_task_is_redelivered_within_bound_and_runs_once",
    "tests/documents/test_restore_lock.py::"
    "test_a_worker_killed_holding_the_restore_lock_has_its_documents_restarted",
    "tests/documents/test_leases.py::"
    "test_a_deploy_keeps_renewing_a_long_document_until_it_is_done_once",
    "tests/documents/test_leases.py::"
    "test_the_ack_of_a_superseded_copy_leaves_the_claim_holders_lease",
    "tests/documents/test_reconciler.py::"
    "test_documents_whose_messages_redis_lost_are_finished_by_the_reconciler",
    "tests/reports/test_pool_child_lost.py::test_a_run_whose_pool_child_was_killed_is_marked_lost",
]
# Seconds a single run may take before it counts as failed (a hung test is a failure too).
RUN_TIMEOUT_S = 600


def burn(stop_at: float) -> None:
    while time.time() < stop_at:
        sum(i * i for i in range(10_000))


def run_once(node: str) -> tuple[bool, float, str]:
    started = time.monotonic()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", node, "-q", "-p", "no:cacheprovider"],
            cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        passed, tail = result.returncode == 0, (result.stdout + result.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        passed, tail = False, f"timed out after {RUN_TIMEOUT_S} s"
    return passed, time.monotonic() - started, tail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each test in a row")
    parser.add_argument("--test", action="append", help="a pytest node id (default: all)")
    parser.add_argument("--burners", type=int, default=2, help="CPU-burning processes")
    parser.add_argument("--max-minutes", type=float, default=0,
                        help="start no new run after this long (0: no limit)")
    args = parser.parse_args()
    stop_after = time.monotonic() + args.max_minutes * 60 if args.max_minutes else float("inf")
    tests = args.test or KILL_TESTS

    burners = [multiprocessing.Process(target=burn, args=(time.time() + 24 * 3600,),
                                       daemon=True) for _ in range(args.burners)]
    for proc in burners:
        proc.start()
    results: dict[str, dict[str, Any]] = {
        node: {"runs": 0, "passed": 0, "seconds": [], "failures": []} for node in tests}
    try:
        # Round-robin over the tests, so a session stopped early has runs of every test.
        for n in range(args.runs):
            for node in tests:
                if time.monotonic() > stop_after:
                    break
                passed, took, tail = run_once(node)
                r = results[node]
                r["runs"] += 1
                r["passed"] += int(passed)
                r["seconds"].append(round(took, 1))
                if not passed:
                    r["failures"].append(tail)
                progress(f"{node.split('::')[-1]}: run {n + 1}/{args.runs} "
                         f"{'pass' if passed else 'FAIL'} ({took:.0f} s); "
                         f"{r['passed']}/{r['runs']} passed so far")
                # Saved after every run: a long session stopped early keeps what it measured.
                save_json("kill_tests_under_load", {
                    "burners": args.burners, "runs_per_test": args.runs, "results": results,
                    "note": "measured on a shared, loaded 2-core machine",
                })
    finally:
        for proc in burners:
            proc.terminate()

    done = min(r["runs"] for r in results.values())
    fig, ax = new_figure(f"Kill tests, {done}+ runs each, {args.burners} CPU burners")
    labels = [node.split("::")[-1][:40] for node in results]
    ax.barh(labels, [r["runs"] for r in results.values()], color="tab:red", label="failed")
    ax.barh(labels, [r["passed"] for r in results.values()], color="tab:green", label="passed")
    ax.legend()
    ax.set_xlim(0, max(r["runs"] for r in results.values()))
    ax.set_xlabel("runs passed")
    save_figure(fig, "kill_tests_under_load")
    for node, r in results.items():
        print(f"{r['passed']}/{r['runs']} passed  {node}")


if __name__ == "__main__":
    main()
