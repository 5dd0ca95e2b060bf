"""Validation of the stream's query string: a bad value is a 400, never a silent default."""

from __future__ import annotations

from django.conf import settings
from django.http import QueryDict


class StreamParamError(Exception):
    pass


def rate_from_query(query: QueryDict) -> float:
    raw = query.get("rate")
    if raw is None or raw == "":
        return float(settings.TELEMETRY_RATE_HZ)
    try:
        rate = float(raw)
    except ValueError:
        raise StreamParamError(f"rate must be a number of samples per second, got {raw!r}.") \
            from None
    low, high = settings.TELEMETRY_MIN_RATE_HZ, settings.TELEMETRY_MAX_RATE_HZ
    if not low <= rate <= high:  # also refuses nan and inf
        raise StreamParamError(f"rate must be between {low} and {high} samples per second.")
    return rate
