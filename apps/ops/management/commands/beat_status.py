"""Which beat leads, since when, and when its lock expires."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import redis
from django.core.management.base import BaseCommand, CommandError, CommandParser

from celery_conf.connections import redis_client
from scheduler.lease import read_leadership


def _at(timestamp: float | None) -> str:
    if timestamp is None:
        return "unknown"
    return datetime.fromtimestamp(timestamp, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class Command(BaseCommand):
    help = "Show which beat holds the RedBeat lock, since when, and when the lock expires."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON instead of text")

    def handle(self, *args: Any, json: bool = False, **options: Any) -> None:
        try:
            state = read_leadership(redis_client())
        except redis.RedisError as exc:
            raise CommandError(f"Redis unreachable: {exc}") from exc
        if json:
            self.stdout.write(_dumps(state))
            return
        if state["leader"] is None:
            self.stdout.write(self.style.WARNING(
                f"no beat leads ({state['lock_key']} is free): a standby takes it within one "
                "loop interval; if none does, check the beat processes"))
            return
        self.stdout.write(f"leader        {state['leader']}")
        self.stdout.write(f"since         {_at(state['since'])}"
                          + (f" ({state['leading_for_s']} s)" if state["since"] else ""))
        self.stdout.write(f"lock expires  {_at(state['lock_expires_at'])} "
                          f"(in {state['lock_expires_in_s']} s unless renewed)")
        self.stdout.write(f"lock key      {state['lock_key']}")
        self.stdout.write(f"checked at    {_at(time.time())}")


def _dumps(state: dict[str, Any]) -> str:
    return json.dumps(state, indent=2)
