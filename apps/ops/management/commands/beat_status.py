"""Which beat leads, since when, and when its lock expires; the fence's journal on request."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import redis
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.humanize import time_text
from celery_conf.connections import redis_client
from scheduler.lease import read_journal, read_leadership


class Command(BaseCommand):
    help = "Show which beat holds the RedBeat lock, since when, and when the lock expires."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON instead of text")
        parser.add_argument("--journal", type=int, default=0, metavar="N",
                            help="also print the fence's last N journal entries (elections, "
                                 "renewals, fires) in the order Redis applied them")

    def handle(self, *args: Any, json: bool = False, journal: int = 0, **options: Any) -> None:
        if journal < 0:
            raise CommandError("--journal must be zero or more entries")
        try:
            client = redis_client()
            state = read_leadership(client)
            entries = read_journal(client, last=journal) if journal else []
        except redis.RedisError as exc:
            raise CommandError(f"Redis unreachable: {exc}") from exc
        if json and journal:
            state["journal"] = [vars(entry) for entry in entries]
        if json:
            self.stdout.write(_dumps(state))
            return
        if state["leader"] is None:
            self.stdout.write(self.style.WARNING(
                f"no beat leads ({state['lock_key']} is free): a standby takes it within one "
                "loop interval; if none does, check the beat processes"))
        else:
            self._leader(state)
        if journal:
            self.stdout.write(f"journal       last {len(entries)} entries, oldest first "
                              "(Redis's clock):")
            for entry in entries:
                detail = "" if entry.detail == "-" else " " + _fired(entry.detail)
                self.stdout.write(f"  {time_text(entry.at, relative=False, milliseconds=True)}  "
                                  f"{entry.kind:<9} {entry.token}{detail}")

    def _leader(self, state: dict[str, Any]) -> None:
        now = time.time()
        self.stdout.write(f"leader        {state['leader']}")
        self.stdout.write(f"since         {time_text(state['since'], now=now)}")
        self.stdout.write(f"lock expires  {time_text(state['lock_expires_at'], now=now)}"
                          " unless renewed (the leader renews it every loop)")
        self.stdout.write(f"lock key      {state['lock_key']}")
        self.stdout.write(f"checked at    {time_text(now, relative=False)}")


def _fired(detail: str) -> str:
    """``<job>|<ISO slot>`` as ``<job> for the slot of <time>``."""
    job, _, slot = detail.partition("|")
    try:
        return f"{job} for the slot of {time_text(datetime.fromisoformat(slot), relative=False)}"
    except ValueError:
        return detail


def _dumps(state: dict[str, Any]) -> str:
    return json.dumps(state, indent=2)
