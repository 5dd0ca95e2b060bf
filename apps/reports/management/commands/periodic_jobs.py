"""List the periodic jobs: schedule, missed-slot policy, next slot, last run."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from apps.humanize import duration_text, time_text
from apps.reports.selectors import job_overviews


class Command(BaseCommand):
    help = "List every periodic job with its interval, missed-slot policy, next slot and last run."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON instead of text")

    def handle(self, *args: Any, json: bool = False, **options: Any) -> None:
        overviews = job_overviews()
        rows = []
        for o in overviews:
            last = o.last_run
            rows.append({
                "job": o.job.name,
                "every_s": o.job.every,
                "missed": str(o.job.missed),
                "expires_s": o.job.expires,
                "next_slot": o.next_slot.isoformat(),
                "last_run": None if last is None else {
                    "kind": last.kind, "slot": last.slot.isoformat(), "outcome": last.outcome,
                    "worker": last.worker,
                },
                "runs": o.runs,
                "why": o.job.why,
            })
        if json:
            import json as json_module

            self.stdout.write(json_module.dumps(rows, indent=2))
            return
        for o in overviews:
            last = o.last_run
            self.stdout.write(f"{o.job.name}  every {duration_text(o.job.every)}, "
                              f"missed slots: {o.job.missed}")
            self.stdout.write(f"  {o.job.why}")
            self.stdout.write(f"  next slot  {time_text(o.next_slot)}")
            self.stdout.write("  last run   never" if last is None else (
                f"  last run   {last.outcome} ({last.kind}) for the slot of "
                f"{time_text(last.slot)} on {last.worker or 'no worker yet'}; "
                f"{o.runs} run{'s' if o.runs != 1 else ''} recorded"))
            self.stdout.write("")
