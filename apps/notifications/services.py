"""Writes for notifications: the admin broadcast."""

from __future__ import annotations

from apps.events.bus import publish_event
from apps.events.types import Event

BROADCAST_KIND = "broadcast"
BROADCAST_MAX_CHARS = 500


class BroadcastError(ValueError):
    """The message cannot be sent as given; nothing was published."""


def broadcast_send(*, message: str, sender: str) -> Event:
    """Send ``message`` to every logged-in user's open pages, whichever worker serves them."""
    text = message.strip()
    if not text:
        raise BroadcastError("The message is empty.")
    if len(text) > BROADCAST_MAX_CHARS:
        raise BroadcastError(f"The message is longer than {BROADCAST_MAX_CHARS} characters.")
    return publish_event(kind=BROADCAST_KIND, user_id=None,
                         data={"message": text, "sender": sender})
