"""The metering day is the UTC calendar day; the limit resets at UTC midnight."""

from __future__ import annotations

import datetime as dt
import math

UTC = dt.UTC


def today_utc(now: dt.datetime | None = None) -> dt.date:
    return (now or dt.datetime.now(UTC)).astimezone(UTC).date()


def next_reset(now: dt.datetime | None = None) -> dt.datetime:
    day = today_utc(now)
    return dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=UTC)


def seconds_to_reset(now: dt.datetime | None = None) -> int:
    now = now or dt.datetime.now(UTC)
    return max(1, math.ceil((next_reset(now) - now).total_seconds()))
