"""The broker's queues as the platform reads them: lengths, and how old the oldest message is.

The layout is the one the policy states in kombu's documented transport options
(celery_conf/policy.py): one priority step, so each queue is exactly one Redis list named after
it (Celery's monitoring guide: ``redis-cli llen QUEUE_NAME``), plus ``global_keyprefix`` when
one is set; ``unacked_key`` names the hash of delivered, unacknowledged messages. Nothing here
copies kombu's defaults or calls its channel.

Every message the platform publishes carries ``platform_queued_at`` (epoch seconds) among its
Celery headers (``apply_async(headers=...)``, a documented option). A queue's oldest waiting
message is then the older of the messages at its two ends, whichever end kombu pushes to: a
read of two list elements, whatever the backlog (adr/0030). A message without the header (sent
by something else) has no age; the caller decides what that means.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import redis

from .celery_app import app

QUEUED_AT_HEADER = "platform_queued_at"


class LayoutNotStated(RuntimeError):
    """The transport options do not say the one-list-per-queue layout this module reads."""


def _transport_options() -> dict[str, Any]:
    return app.conf.broker_transport_options or {}


def queue_key(queue: str) -> str:
    """The Redis list holding ``queue``'s waiting messages."""
    options = _transport_options()
    if list(options.get("priority_steps") or ()) != [0]:
        raise LayoutNotStated(
            "broker_transport_options must set priority_steps to [0] (celery_conf/policy.py): "
            "with several steps a queue is several lists")
    return f"{options.get('global_keyprefix') or ''}{queue}"


def unacked_key() -> str:
    options = _transport_options()
    return f"{options.get('global_keyprefix') or ''}{options.get('unacked_key', 'unacked')}"


def queue_lengths(client: redis.Redis, queues: Iterable[str]) -> dict[str, int]:
    names = list(queues)
    pipe = client.pipeline(transaction=False)
    for queue in names:
        pipe.llen(queue_key(queue))
    return dict(zip(names, (int(n) for n in pipe.execute()), strict=True))


def message_headers(raw: str | bytes | None) -> dict[str, Any]:
    """The Celery headers of one stored message (the message protocol's ``headers``), or {}."""
    if raw is None:
        return {}
    try:
        envelope = json.loads(raw)
        headers = envelope.get("headers") if isinstance(envelope, dict) else None
    except (ValueError, TypeError):
        return {}
    return headers if isinstance(headers, dict) else {}


def queued_at(raw: str | bytes | None) -> float | None:
    stamp = message_headers(raw).get(QUEUED_AT_HEADER)
    try:
        return float(stamp) if stamp is not None else None
    except (TypeError, ValueError):
        return None


def queue_ends(client: redis.Redis, queues: Iterable[str]) -> dict[str, list[Any]]:
    """Each queue's messages at its two ends (one or two; none when empty), in one round trip."""
    names = list(queues)
    pipe = client.pipeline(transaction=False)
    for queue in names:
        key = queue_key(queue)
        pipe.lindex(key, 0)
        pipe.lindex(key, -1)
    raw = pipe.execute()
    ends: dict[str, list[Any]] = {}
    for i, queue in enumerate(names):
        first, last = raw[2 * i], raw[2 * i + 1]
        ends[queue] = [m for m in ((first, last) if first != last else (first,)) if m is not None]
    return ends


def oldest_queued_at(client: redis.Redis, queue: str) -> tuple[bool, float | None]:
    """(waiting, stamp): whether ``queue`` holds any message, and the oldest ``queued_at``
    among its two ends (None when neither end carries one)."""
    ends = queue_ends(client, [queue])[queue]
    stamps = [s for s in (queued_at(m) for m in ends) if s is not None]
    return bool(ends), (min(stamps) if stamps else None)
