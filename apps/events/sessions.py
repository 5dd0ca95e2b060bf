"""Sessions end streams: logout, deactivation, a password change or a deleted user close them.

A stream authenticates once, when it opens (``apps.stream_front``); from then on it holds no
database connection, so it cannot notice a change by itself. These signal handlers publish
"close user U's streams (of session S)" on the bus's control channel; every web worker's hub
closes the matching streams within one pub/sub hop. A closed stream's browser reconnects and
authenticates again: a live session goes on from its Last-Event-ID, an ended one gets 401.
Session expiry needs no message: each stream ends at its session's expiry time.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from celery_conf.connections import redis_client

from .bus import CONTROL_CHANNEL

log = logging.getLogger(__name__)

# A change to any of these fields may end the user's sessions (a password change also changes
# the session hash Django checks); other saves (last_login on every login) do not.
CREDENTIAL_FIELDS = frozenset({"password", "is_active"})


def session_hash(session_key: str) -> str:
    """What a stream and a control message call a session: never the key, which is a secret."""
    return hashlib.sha256(f"stream-session:{session_key}".encode()).hexdigest()[:32]


def streams_end_publish(*, user_id: int, session_key: str | None) -> None:
    """Close ``user_id``'s open streams (only those of ``session_key`` when given); never raises.

    Redis being unreachable here also drops every hub's subscription, which closes every
    stream anyway; so a failed publish is logged, not raised into the logout or the save.
    """
    message = json.dumps({
        "user": user_id, "session": session_hash(session_key) if session_key else None})
    try:
        redis_client().publish(CONTROL_CHANNEL, message)
    except (redis.RedisError, OSError) as exc:
        log.warning("could not end the streams of user %s: %s", user_id, exc)


def _on_logout(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    if user is None:
        return
    # Sent before the session is flushed: the key still names the session that ends.
    streams_end_publish(user_id=user.pk, session_key=request.session.session_key)


def _on_user_saved(sender: Any, instance: Any, created: bool, update_fields: Any,
                   **kwargs: Any) -> None:
    if created or (update_fields is not None and not CREDENTIAL_FIELDS & set(update_fields)):
        return
    # After the commit, so the reconnecting stream reads the new password hash or flag.
    user_id = instance.pk
    transaction.on_commit(lambda: streams_end_publish(user_id=user_id, session_key=None))


def _on_user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    user_id = instance.pk
    transaction.on_commit(lambda: streams_end_publish(user_id=user_id, session_key=None))


def connect_signals() -> None:
    user_logged_out.connect(_on_logout, dispatch_uid="events.sessions.logout")
    post_save.connect(_on_user_saved, sender=settings.AUTH_USER_MODEL,
                      dispatch_uid="events.sessions.user_saved")
    post_delete.connect(_on_user_deleted, sender=settings.AUTH_USER_MODEL,
                        dispatch_uid="events.sessions.user_deleted")
