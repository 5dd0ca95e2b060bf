"""Which beat leads, since when, and when its lock expires."""

from __future__ import annotations

import json
import time
from typing import Any

import redis
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.humanize import time_text
from celery_conf.connections import redis_client
from scheduler.lease import read_leadership


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
        now = time.time()
        self.stdout.write(f"since         {time_text(state['since'], now=now)}")
        self.stdout.write(f"lock expires  {time_text(state['lock_expires_at'], now=now)}"
                          " unless renewed (the leader renews it every loop)")
        self.stdout.write(f"lock key      {state['lock_key']}")
        self.stdout.write(f"checked at    {time_text(now, relative=False)}")


def _dumps(state: dict[str, Any]) -> str:
    return json.dumps(state, indent=2)
