"""List the periodic jobs: schedule, missed-slot policy, next slot, last run."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from apps.reports.selectors import job_overviews


class Command(BaseCommand):
    help = "List every periodic job with its interval, missed-slot policy, next slot and last run."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def handle(self, *args: Any, json: bool = False, **options: Any) -> None:
        rows = []
        for o in job_overviews():
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
        self.stdout.write(
            f"{'job':<26} {'every':>7} {'missed':<9} {'next slot (UTC)':<20} last run")
        for row in rows:
            last = row["last_run"]
            last_text = "never" if last is None else (
                f"{last['outcome']} {last['kind']} {last['slot'][:19]} on {last['worker']}")
            self.stdout.write(f"{row['job']:<26} {row['every_s']:>6}s {row['missed']:<9} "
                              f"{row['next_slot'][:19]:<20} {last_text}")
            self.stdout.write(f"{'':<26} {row['why']}")
