"""Thousands of fuzzed requests against a live server: the JSON API, the upload form, the
stream parameters. No answer may be a 500, and no refused request may change anything.

    .venv/bin/python loadtests/fuzz_endpoints.py [--examples 2000]

The same strategies and checks as tests/notifications/test_fuzz.py (tests/notifications/
fuzzing.py), with --examples cases per target instead of the suite's 120. One stack: Redis,
uvicorn with 2 workers, SQLite. Prints progress; writes loadtests/results/fuzz_endpoints.
{json,png}.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.common import new_figure, progress, save_figure, save_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=2000, help="cases per target")
    args = parser.parse_args()

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.notifications.fuzzing import (
        CURSORS,
        STREAM_TARGETS,
        Tally,
        json_bodies,
        post_json,
        post_upload,
        stream_case,
        uploads,
    )
    from tests.procs import Stack, make_template_db

    run = settings(max_examples=args.examples, deadline=None, database=None,
                   suppress_health_check=list(HealthCheck))
    base = Path(tempfile.mkdtemp(prefix="fuzz-"))
    stack = Stack(base_dir=base / "stack", template_db=make_template_db(base / "template"),
                  env_overrides={"METERING_DAILY_LIMIT": "100000000"})
    tallies: dict[str, Tally] = {}
    seconds: dict[str, float] = {}
    try:
        web = stack.start_web(workers=2)
        client = web.session()

        def target(name: str, test) -> None:  # type: ignore[no-untyped-def]
            started = time.monotonic()
            test()
            seconds[name] = time.monotonic() - started
            t = tallies[name]
            progress(f"{name}: {t.cases} cases in {seconds[name]:.0f} s, statuses "
                     f"{dict(sorted(t.statuses.items()))}, 500s {len(t.server_errors)}, "
                     f"changed by a refusal {len(t.changed_by_refusal)}")

        def tick(name: str) -> None:
            t = tallies[name]
            if t.cases % 250 == 0:
                progress(f"{name}: {t.cases} cases, 500s {len(t.server_errors)}, "
                         f"changed by a refusal {len(t.changed_by_refusal)}")

        tallies["json_api"] = Tally()

        @run
        @given(json_bodies())
        def json_api(case: tuple[str, bytes]) -> None:
            post_json(stack, client, tallies["json_api"], *case)
            tick("json_api")

        tallies["upload_form"] = Tally()

        @run
        @given(uploads())
        def upload_form(form: dict) -> None:
            post_upload(stack, client, tallies["upload_form"], form)
            tick("upload_form")

        tallies["stream_params"] = Tally()

        @run
        @given(st.sampled_from(STREAM_TARGETS),
               CURSORS | st.sampled_from(["25", "0", "nan", "-1", "1e309", "50.0000001"]))
        def stream_params(where: str, value: str) -> None:
            stream_case(stack, client, tallies["stream_params"], where, value)
            tick("stream_params")

        target("json_api", json_api)
        target("upload_form", upload_form)
        target("stream_params", stream_params)
    finally:
        stack.stop()
    result = {name: {"cases": t.cases, "seconds": seconds.get(name),
                     "statuses": dict(sorted(t.statuses.items())),
                     "server_errors": t.server_errors[:50],
                     "changed_by_refusal": t.changed_by_refusal[:50]}
              for name, t in tallies.items()}
    save_json("fuzz_endpoints", {"examples_per_target": args.examples, "targets": result})
    fig, ax = new_figure("Fuzzed requests by answer (Hypothesis)")
    names = list(result)
    statuses = sorted({s for r in result.values() for s in r["statuses"]})
    bottom = [0] * len(names)
    for status in statuses:
        heights = [result[n]["statuses"].get(status, 0) for n in names]
        ax.bar(names, heights, bottom=bottom, label=str(status))
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_ylabel("requests")
    ax.legend(title="HTTP status", fontsize=8)
    progress(f"wrote {save_figure(fig, 'fuzz_endpoints')}")
    failed = any(r["server_errors"] or r["changed_by_refusal"] for r in result.values())
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
