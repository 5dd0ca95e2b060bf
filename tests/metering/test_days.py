"""The metering day is the UTC day; Retry-After counts to the next UTC midnight."""

from __future__ import annotations

import datetime as dt

from apps.metering.days import next_reset, seconds_to_reset, today_utc

UTC = dt.UTC


def test_the_day_is_utc_whatever_the_callers_zone():
    late_in_new_york = dt.datetime(2026, 3, 1, 22, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    assert today_utc(late_in_new_york) == dt.date(2026, 3, 2)


def test_retry_after_runs_to_midnight_and_is_never_zero():
    assert seconds_to_reset(dt.datetime(2026, 3, 1, 23, 0, tzinfo=UTC)) == 3600
    assert seconds_to_reset(dt.datetime(2026, 3, 1, 0, 0, tzinfo=UTC)) == 86_400
    assert seconds_to_reset(dt.datetime(2026, 3, 1, 23, 59, 59, 999_000, tzinfo=UTC)) == 1
    assert next_reset(dt.datetime(2026, 12, 31, 12, tzinfo=UTC)) == dt.datetime(
        2027, 1, 1, tzinfo=UTC)
