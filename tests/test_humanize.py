"""Times, durations and sizes as every command and page words them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from apps.humanize import duration_text, size_text, time_text

NOW = datetime(2026, 12, 3, 15, 49, 27, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(("seconds", "text"), [
    (0.44, "0.4 s"), (9.8, "9.8 s"), (1.0, "1 s"), (4.96, "5 s"), (12.3, "12 s"),
    (61, "1 min 1 s"), (200, "3 min 20 s"),
    (3600, "1 h"), (7300, "2 h 1 min"), (3 * 86400 + 4 * 3600 + 5, "3 d 4 h"), (-9.8, "9.8 s"),
])
def test_durations(seconds: float, text: str):
    assert duration_text(seconds) == text


def test_times_carry_their_zone_and_distance():
    # Django sets the process's zone from TIME_ZONE (UTC as shipped).
    assert time_text(NOW - 9.8, now=NOW) == "2026-12-03 15:49:17 UTC (9.8 s ago)"
    assert time_text(NOW + 4.6, now=NOW) == "2026-12-03 15:49:31 UTC (in 4.6 s)"
    assert time_text(datetime.fromtimestamp(NOW, tz=UTC), relative=False) == (
        "2026-12-03 15:49:27 UTC")
    assert time_text(NOW + 0.042, relative=False, milliseconds=True) == (
        "2026-12-03 15:49:27.042 UTC")
    assert time_text(None) == "unknown"


@pytest.mark.parametrize(("size", "text"), [
    (900, "900 bytes"), (1024, "1 KiB"), (65536, "64 KiB"), (1048576, "1 MiB"),
    (1114112, "1.06 MiB"), (1572864, "1.5 MiB"),
])
def test_sizes_in_the_forms_units(size: int, text: str):
    assert size_text(size) == text
