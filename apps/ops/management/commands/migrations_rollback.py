"""Print where the schema stands (per app), or migrate back to where it stood before."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.ops.migrations_plan import (
    migration_leaves,
    migration_targets_back,
    migrations_applied_leaves,
)


class Command(BaseCommand):
    help = ("--applied: print the newest applied migration per app (JSON). --leaves: the same "
            "for this code's migration files. --back-to FILE|-: migrate every app back to "
            "those recorded before an upgrade.")

    def add_arguments(self, parser: CommandParser) -> None:
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--applied", action="store_true")
        group.add_argument("--leaves", action="store_true")
        group.add_argument("--back-to", metavar="FILE")

    def handle(self, *args: Any, applied: bool = False, leaves: bool = False,
               back_to: str | None = None, **options: Any) -> None:
        if applied:
            self.stdout.write(json.dumps(migrations_applied_leaves()))
            return
        if leaves:
            self.stdout.write(json.dumps(migration_leaves()))
            return
        try:
            text = sys.stdin.read() if back_to == "-" else open(back_to or "").read()
            older = json.loads(text)
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read the older release's leaves: {exc}") from exc
        if not isinstance(older, dict):
            raise CommandError("the older release's leaves must be a JSON object {app: name}")
        targets = migration_targets_back(leaves=older)
        for app, target in targets.items():
            self.stdout.write(f"migrating {app} back to {target}")
            call_command("migrate", app, target, interactive=False, verbosity=0)
        self.stdout.write(json.dumps({"migrated_back": targets}))
