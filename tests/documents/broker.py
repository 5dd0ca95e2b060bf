"""Timings scaled down for process tests, and hands-on access to a Stack's broker state.

The timings go through the same settings as production (config/settings/base.py reads them
once); the helpers remove a document's message by hand, as Redis losing it would.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from celery_conf.names import DOCUMENT_PROCESS
from celery_conf.policy import queue_lists
from celery_conf.queues import message_headers
from tests.procs import Stack

# Heartbeats every 0.5 s, so a dead worker's key is gone 2.5 s after its last write: the
# leading beat's recovery hands its documents on within about 3 s.
FAST_RECOVERY = {"CELERY_HEARTBEAT_INTERVAL": "0.5"}
# The reconciler every 2 s, and the orphan watermark's grace at 3 s.
FAST_RECONCILER = {"PLATFORM_RECONCILE_EVERY_S": "2", "DOCUMENTS_RECONCILE_AFTER_S": "3"}
# The documents queue's lists, one per priority step (celery_conf/policy.py).
QUEUE_LISTS = queue_lists("documents")


def document_of(raw: str | bytes) -> int | None:
    """The document id a stored Celery message of ``documents.process`` is for, else None."""
    try:
        envelope = json.loads(raw)
        if message_headers(raw).get("task") != DOCUMENT_PROCESS:
            return None
        body = envelope["body"]
        if envelope.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args, _kwargs, _embed = json.loads(body)
        return int(args[0])
    except (ValueError, KeyError, TypeError, IndexError):
        return None


def drop_queued_message(stack: Stack, doc_id: int) -> bool:
    """Delete the document's message from the queue, as a lost write would."""
    client = stack.redis.client()
    for key in QUEUE_LISTS:
        for raw in client.lrange(key, 0, -1):
            if document_of(raw) == doc_id:
                return bool(client.lrem(key, 1, raw))
    return False


def queued_messages(stack: Stack, doc_id: int) -> list[dict[str, Any]]:
    """The headers of every message for ``doc_id`` waiting in the queue."""
    client = stack.redis.client()
    return [message_headers(raw) for key in QUEUE_LISTS for raw in client.lrange(key, 0, -1)
            if document_of(raw) == doc_id]


def unacked_tags(stack: Stack, doc_id: int) -> list[str]:
    client = stack.redis.client()
    return [tag for tag, entry in client.hgetall("unacked").items()
            if document_of(json.dumps(json.loads(entry)[0])) == doc_id]


def drop_unacked_message(stack: Stack, doc_id: int) -> bool:
    """Delete the document's in-flight entry, as a worker losing it in the BRPOP window."""
    client = stack.redis.client()
    tags = unacked_tags(stack, doc_id)
    for tag in tags:
        client.pipeline().hdel("unacked", tag).zrem("unacked_index", tag).execute()
    return bool(tags)
