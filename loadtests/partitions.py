"""Partitions too long for CI: a worker host cut from the data host mid-document, healed.

    .venv/bin/python loadtests/partitions.py [--cut 120 ...] [--repeat 1]

Runs as root (``ip netns``). Each cut length runs tests/partitions/worker_cut.py's scenario
on hosts in network namespaces of their own over TLS (tests/partitions/conftest.py): four
10 s documents over two workers of two slots, the worker host running two of them cut for
the given seconds, then healed. Counts from the history checker (acknowledged, done, lost,
stuck, doubled, effects twice, late results dropped) and the times (handed on, started
again, all done after the heal). Writes loadtests/results/partitions.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common import progress, save_json  # noqa: E402
from tests.partitions.conftest import start_apart  # noqa: E402
from tests.partitions.worker_cut import start_worker_cut_hosts, worker_cut  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cut", type=float, nargs="+", default=[120.0])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()

    runs: list[dict[str, Any]] = []
    failures = 0
    apart = start_apart(Path(tempfile.mkdtemp(prefix="partitions-")))
    try:
        web, workers = start_worker_cut_hosts(apart)
        for round_ in range(args.repeat):
            for cut_s in args.cut:
                progress(f"round {round_ + 1}: worker host cut for {cut_s:g} s")
                verdict, measured = worker_cut(apart, web, workers, cut_s=cut_s)
                measured["violations"] = verdict.violations
                failures += bool(verdict.violations) or not measured["hostB_worker_alive"]
                progress(f"  {measured}")
                runs.append(measured)
    finally:
        apart.stop()
    path = save_json("partitions", {"runs": runs, "failures": failures})
    progress(f"wrote {path}; {failures} run(s) with violations")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
