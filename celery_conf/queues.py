"""The broker's queues as the platform reads them: lengths, and how old the oldest message is.

The layout is the one the policy states in kombu's documented transport options
(celery_conf/policy.py): a queue is one Redis list per priority step, the first named after the
queue and the others ``QUEUE<sep><step>`` (Celery's Redis guide, "Message Priorities"), plus
``global_keyprefix`` when one is set; ``unacked_key`` names the hash of delivered,
unacknowledged messages. Nothing here copies kombu's defaults or calls its channel.

Every message the platform publishes carries ``platform_queued_at`` (epoch seconds) among its
Celery headers (``apply_async(headers=...)``, a documented option). A queue's oldest waiting
message is then the oldest of the messages at its lists' two ends, whichever end kombu pushes
to: a read of two elements per list, whatever the backlog (adr/0030). A message without the
header (sent by something else) has no age; the caller decides what that means.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import redis

from .celery_app import app
from .policy import queue_lists

QUEUED_AT_HEADER = "platform_queued_at"


class LayoutNotStated(RuntimeError):
    """The transport options do not state the layout this module reads."""


def _transport_options() -> dict[str, Any]:
    return app.conf.broker_transport_options or {}


def queue_keys(queue: str) -> list[str]:
    """The Redis lists holding ``queue``'s waiting messages, the first served first."""
    options = _transport_options()
    steps = list(options.get("priority_steps") or ())
    sep = options.get("sep")
    if not steps or steps[0] != 0 or steps != sorted(set(steps)) or (len(steps) > 1 and not sep):
        raise LayoutNotStated(
            "broker_transport_options must state priority_steps (ascending, from 0) and sep "
            "(celery_conf/policy.py): the queue's lists are named from them")
    return queue_lists(queue, steps=tuple(steps), sep=sep or "",
                       prefix=options.get("global_keyprefix") or "")


def unacked_key() -> str:
    options = _transport_options()
    return f"{options.get('global_keyprefix') or ''}{options.get('unacked_key', 'unacked')}"


def queue_lengths(client: redis.Redis, queues: Iterable[str]) -> dict[str, int]:
    names = list(queues)
    pipe = client.pipeline(transaction=False)
    keys = {queue: queue_keys(queue) for queue in names}
    for queue in names:
        for key in keys[queue]:
            pipe.llen(key)
    counts = iter(int(n) for n in pipe.execute())
    return {queue: sum(next(counts) for _ in keys[queue]) for queue in names}


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
    """Each queue's messages at its lists' two ends (none when empty), in one round trip."""
    names = list(queues)
    keys = {queue: queue_keys(queue) for queue in names}
    pipe = client.pipeline(transaction=False)
    for queue in names:
        for key in keys[queue]:
            pipe.lindex(key, 0)
            pipe.lindex(key, -1)
    raw = iter(pipe.execute())
    ends: dict[str, list[Any]] = {}
    for queue in names:
        ends[queue] = []
        for _ in keys[queue]:
            first, last = next(raw), next(raw)
            ends[queue] += [m for m in ((first, last) if first != last else (first,))
                            if m is not None]
    return ends


def oldest_queued_at(client: redis.Redis, queue: str) -> tuple[bool, float | None]:
    """(waiting, stamp): whether ``queue`` holds any message, and the oldest ``queued_at``
    among its lists' ends (None when no end carries one)."""
    ends = queue_ends(client, [queue])[queue]
    stamps = [s for s in (queued_at(m) for m in ends) if s is not None]
    return bool(ends), (min(stamps) if stamps else None)
