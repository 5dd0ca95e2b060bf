"""``manage.py broadcast "message"``: send a message to every logged-in user's open pages."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from redis import RedisError

from apps.notifications.services import BroadcastError, broadcast_send


class Command(BaseCommand):
    help = "Broadcast a message to every open page, whichever web worker serves it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("message")
        parser.add_argument("--sender", default="operator")

    def handle(self, *args: Any, message: str, sender: str, **options: Any) -> None:
        try:
            event = broadcast_send(message=message, sender=sender)
        except BroadcastError as exc:
            raise CommandError(str(exc)) from exc
        except RedisError as exc:
            raise CommandError(f"Redis refused the event, nothing was sent: {exc}") from exc
        self.stdout.write(f"broadcast {event.id}")
