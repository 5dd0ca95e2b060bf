"""What the broker holds for one task: the arguments of every message queued or in flight.

The reconciler asks this before it re-enqueues anything, so a document merely waiting in a
long backlog is never enqueued twice. One MULTI/EXEC reads the queue's lists and kombu's
``unacked`` hash together: a message moving between them (a restore, a delivery) is seen in
exactly one. Only a message between a worker's BRPOP and its write to ``unacked`` (a few
milliseconds) is in neither; the caller looks twice, a second apart, to cover that window.
Names of lists and hashes come from kombu's own channel, key prefix and priorities included.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from .celery_app import app


def _message_args(payload: Any, task_name: str) -> list[Any] | None:
    try:
        headers = payload.get("headers") or {}
        if headers.get("task") != task_name:
            return None
        body = payload["body"]
        if payload.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args, _kwargs, _embed = json.loads(body)
        return list(args)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # not a Celery message of ours: nothing to match


def task_args_in_broker(*, task_name: str, queue: str) -> list[list[Any]]:
    """The positional arguments of every ``task_name`` message queued on ``queue`` or unacked.

    Raises kombu/redis connection errors: the caller must not act on a failed read.
    """
    found: list[list[Any]] = []
    with app.connection_for_read() as conn:
        channel = conn.default_channel
        with channel.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=True)
            for priority in channel.priority_steps:
                pipe.lrange(channel._q_for_pri(queue, priority), 0, -1)
            pipe.hvals(channel.unacked_key)
            *lists, unacked = pipe.execute()
    payloads: list[Any] = []
    for raw in (item for items in lists for item in items):
        try:
            payloads.append(json.loads(raw))
        except ValueError:
            continue
    for entry in unacked:
        try:
            payloads.append(json.loads(entry)[0])  # [message, exchange, routing key]
        except (ValueError, TypeError, IndexError):
            continue
    for payload in payloads:
        if (args := _message_args(payload, task_name)) is not None:
            found.append(args)
    return found
