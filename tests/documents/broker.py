"""Timings scaled down for process tests, and hands-on access to a Stack's broker state.

The timings go through the same settings as production (config/settings/base.py reads them
once); the helpers remove a document's message by hand, as Redis losing it would.
"""

from __future__ import annotations

import json
from typing import Any

from celery_conf.broker_scan import _message_args
from celery_conf.names import DOCUMENT_PROCESS
from tests.procs import Stack

# Visibility 6 s, renewal 1 s, sweep 1 s, restore lock 3 s (< 6 - 1): redelivery in ~7-10 s.
FAST_LEASES = {
    "CELERY_VISIBILITY_TIMEOUT": "6",
    "CELERY_LEASE_RENEW_INTERVAL": "1",
    "CELERY_RESTORE_SWEEP_INTERVAL": "1",
    "CELERY_UNACKED_MUTEX_EXPIRE": "3",
}
# The reconciler every 2 s, for documents untouched for 3 s.
FAST_RECONCILER = {"PLATFORM_RECONCILE_EVERY_S": "2", "DOCUMENTS_RECONCILE_AFTER_S": "3"}
QUEUE = "documents"


def _document_id(payload: Any) -> int | None:
    args = _message_args(payload, DOCUMENT_PROCESS)
    return int(args[0]) if args else None


def drop_queued_message(stack: Stack, doc_id: int) -> bool:
    """Delete the document's message from the queue, as a lost write would."""
    client = stack.redis.client()
    for raw in client.lrange(QUEUE, 0, -1):
        if _document_id(json.loads(raw)) == doc_id:
            return bool(client.lrem(QUEUE, 1, raw))
    return False


def unacked_tags(stack: Stack, doc_id: int) -> list[str]:
    client = stack.redis.client()
    return [tag for tag, entry in client.hgetall("unacked").items()
            if _document_id(json.loads(entry)[0]) == doc_id]


def drop_unacked_message(stack: Stack, doc_id: int) -> bool:
    """Delete the document's in-flight entry (its lease), as another copy's ack used to."""
    client = stack.redis.client()
    tags = unacked_tags(stack, doc_id)
    for tag in tags:
        client.pipeline().hdel("unacked", tag).zrem("unacked_index", tag).execute()
    return bool(tags)
