"""Writes for metering: take one unit of today's allowance, or give it back."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import redis
from django.conf import settings
from django.db import DatabaseError

from .backends import counters
from .days import today_utc


class MeteringUnavailable(Exception):
    """The counter store did not answer; the call must be refused, since it cannot be counted."""


@dataclass(frozen=True)
class Ticket:
    """A counted call. ``day`` is kept so a give-back after midnight undoes the right day."""

    user_id: int
    day: dt.date


def usage_take(*, user_id: int) -> Ticket | None:
    """Count one call for ``user_id``; None when today's limit is already reached."""
    day = today_utc()
    try:
        taken = counters(settings.METERING_BACKEND).take(
            user_id=user_id, day=day, limit=settings.METERING_DAILY_LIMIT)
    except (DatabaseError, redis.RedisError, OSError) as exc:
        raise MeteringUnavailable(str(exc)) from exc
    return Ticket(user_id=user_id, day=day) if taken else None


def usage_give_back(*, ticket: Ticket) -> None:
    """The counted call created nothing (refused input, queue down): it does not count."""
    try:
        counters(settings.METERING_BACKEND).give_back(user_id=ticket.user_id, day=ticket.day)
    except (DatabaseError, redis.RedisError, OSError) as exc:
        raise MeteringUnavailable(str(exc)) from exc
