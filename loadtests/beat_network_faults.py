"""Every network-fault scenario of the beat election, repeated: one owner, bounded handover,
nothing fired twice, nothing missed.

    .venv/bin/python loadtests/beat_network_faults.py [--repeat 2] [--only NAME ...]

Each run is a fresh platform (real Redis, one Celery worker, two beats each behind its own
fault proxy, a supervisor that restarts a beat that exits) and one fault on one link:
cut, blackhole, blackhole at the task push, blackhole at the last-run write, latency below
and above the renewal interval, flap, cut of the standby's link (tests/scheduler/netfaults.py).
A run fails if a publish landed under a token after a newer election, two beats' leases
overlapped, a slot was pushed twice or missed, or the handover exceeded the lock + one poll +
the injected one-way delay. Writes loadtests/results/beat_network_faults.json and .png.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common import new_figure, progress, save_figure, save_json  # noqa: E402
from tests.procs import Stack, make_template_db  # noqa: E402
from tests.scheduler.netfaults import (  # noqa: E402
    LOCK_TIMEOUT_S,
    POLL_S,
    SCENARIOS,
    Platform,
    check,
    run_scenario,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--only", nargs="*", choices=sorted(SCENARIOS), default=None)
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="beat-netfaults-"))
    template = make_template_db(base / "template")
    runs: list[dict[str, object]] = []
    failures = 0
    names = args.only or list(SCENARIOS)
    for round_ in range(args.repeat):
        for name in names:
            scenario = SCENARIOS[name]
            stacks: list[Stack] = []

            def make_stack(env: dict[str, str] | None = None) -> Stack:
                stack = Stack(base_dir=base / f"{name}-{round_}-{len(stacks)}",  # noqa: B023
                              template_db=template, env_overrides=env or {})
                stacks.append(stack)  # noqa: B023
                return stack

            platform = Platform.start(make_stack)
            error = None
            try:
                verdict = run_scenario(platform, scenario)
                record = {"scenario": name, "round": round_ + 1, **verdict.as_dict()}
                try:
                    check(verdict, scenario)
                except AssertionError as exc:
                    error = str(exc)
            except Exception as exc:  # noqa: BLE001 - a run that could not finish is a failure
                record = {"scenario": name, "round": round_ + 1}
                error = f"{type(exc).__name__}: {exc}"
            finally:
                platform.stop()
                for stack in stacks:
                    stack.stop()
            record["passed"] = error is None
            record["error"] = error
            failures += error is not None
            runs.append(record)
            progress(f"{name} #{round_ + 1}: {'pass' if error is None else 'FAIL ' + error}; "
                     f"handover {record.get('handover_s')} s, "
                     f"fired twice {record.get('journal_fired_twice')}, "
                     f"missed {sum(v for k, v in record.items() if k.startswith('missed_'))}")

    print(f"\n{'scenario':32} {'round':>5} {'handover s':>10} {'bound s':>8} {'believers':>9} "
          f"{'late pub':>8} {'2x fired':>8} {'doubled':>7} {'missed':>6} result")
    for r in runs:
        scenario = SCENARIOS[str(r["scenario"])]
        bound = LOCK_TIMEOUT_S + POLL_S + scenario.delay
        missed = sum(v for k, v in r.items() if k.startswith("missed_"))  # type: ignore[misc]
        handover = r.get("handover_s")
        print(f"{r['scenario']:32} {r['round']:>5} "
              f"{'-' if handover is None else f'{handover:.2f}':>10} {bound:>8.1f} "
              f"{r.get('max_believers', '-'):>9} {r.get('publish_after_newer_election', '-'):>8} "
              f"{r.get('journal_fired_twice', '-'):>8} {r.get('doubled', '-'):>7} {missed:>6} "
              f"{'pass' if r['passed'] else 'FAIL'}")
    print(f"wrote {save_json('beat_network_faults', {'args': vars(args), 'runs': runs})}")

    fig, ax = new_figure("Beat handover under network faults (s, fault to new election)")
    for i, name in enumerate(names):
        values = [r["handover_s"] for r in runs
                  if r["scenario"] == name and r.get("handover_s") is not None]
        ax.plot([i] * len(values), values, "o", color="#457b9d")
        ax.plot([i - 0.3, i + 0.3], [LOCK_TIMEOUT_S + POLL_S + SCENARIOS[name].delay] * 2,
                color="#e63946")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("handover (s); red: bound")
    print(f"wrote {save_figure(fig, 'beat_network_faults')}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
