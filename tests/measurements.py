"""Numbers the failure tests measure, printed at the end of the run (and so in CI's log).

Tests record through the ``measure`` fixture into the report's user_properties, so the numbers
reach the summary from pytest-xdist workers too.
"""

from __future__ import annotations

import json
import os
from typing import Any

MEASUREMENTS: list[dict[str, Any]] = []


def collect(report: Any) -> None:
    if report.when != "call":
        return
    for key, value in report.user_properties:
        if key == "measured":
            MEASUREMENTS.append({"test": report.nodeid.split("::")[-1], **value})


def report_measurements(terminalreporter: Any) -> None:
    terminalreporter.section("measured")
    for row in MEASUREMENTS:
        rest = ", ".join(f"{k}={_fmt(v)}" for k, v in row.items() if k != "test")
        terminalreporter.write_line(f"{row['test']}: {rest}")
    out = os.environ.get("MEASUREMENTS_JSON")
    if out:
        with open(out, "w") as fh:
            json.dump(MEASUREMENTS, fh, indent=2)


def _fmt(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)
