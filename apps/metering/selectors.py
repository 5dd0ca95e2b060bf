"""Reads for metering: one user's usage today, and everyone's for ``manage.py status``."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model

from .backends import counters
from .days import next_reset, seconds_to_reset, today_utc


@dataclass(frozen=True)
class Usage:
    day: dt.date
    count: int
    limit: int
    resets_at: dt.datetime

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.count)

    def as_dict(self) -> dict[str, Any]:
        return {"day": self.day.isoformat(), "count": self.count, "limit": self.limit,
                "remaining": self.remaining, "resets_at": self.resets_at.isoformat(),
                "backend": settings.METERING_BACKEND}


def usage_get(*, user_id: int) -> Usage:
    day = today_utc()
    count = counters(settings.METERING_BACKEND).read(user_id=user_id, day=day)
    return Usage(day=day, count=count, limit=settings.METERING_DAILY_LIMIT,
                 resets_at=next_reset())


def usage_summary(*, top: int = 10) -> dict[str, Any]:
    """Today's totals: for operators, not users."""
    day = today_utc()
    totals = counters(settings.METERING_BACKEND).totals(day=day)
    limit = settings.METERING_DAILY_LIMIT
    names = dict(get_user_model().objects.filter(pk__in=totals).values_list("pk", "username"))
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:top]
    return {
        "backend": settings.METERING_BACKEND,
        "day": day.isoformat(),
        "daily_limit": limit,
        "resets_in_s": seconds_to_reset(),
        "users_today": len(totals),
        "calls_today": sum(totals.values()),
        "users_at_limit": sum(1 for n in totals.values() if n >= limit),
        "top_users": [f"{names.get(u, u)}: {n}" for u, n in ranked],
    }
