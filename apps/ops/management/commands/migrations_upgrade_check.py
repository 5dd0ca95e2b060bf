"""List the migrations an upgrade would apply; fail if a rollback could not undo one."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.ops.migrations_plan import migrations_pending


class Command(BaseCommand):
    help = ("List pending migrations; exit non-zero when one of them cannot be reversed "
            "(a rollback would be impossible).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--allow-irreversible", action="store_true",
                            help="only report irreversible migrations, do not fail")

    def handle(self, *args: Any, allow_irreversible: bool = False, **options: Any) -> None:
        pending = migrations_pending()
        for migration in pending:
            mark = " (IRREVERSIBLE)" if migration.irreversible else ""
            self.stdout.write(f"pending {migration.app}.{migration.name}{mark}")
        blocking = [m for m in pending if m.irreversible]
        if blocking and not allow_irreversible:
            details = "; ".join(f"{m.app}.{m.name}: {', '.join(m.irreversible)}" for m in blocking)
            raise CommandError(
                f"refusing to upgrade: {len(blocking)} pending migration(s) cannot be reversed, "
                f"so a rollback could not restore the schema ({details}). Give each operation "
                "a reverse (RunPython reverse_code, RunSQL reverse_sql), or upgrade with "
                "--allow-irreversible after taking a backup.")
        breaking = [m for m in pending if m.breaks_running]
        if breaking:
            details = "; ".join(f"{m.app}.{m.name}: {', '.join(m.breaks_running)}"
                                for m in breaking)
            raise CommandError(
                f"refusing to upgrade: {len(breaking)} pending migration(s) add a column the "
                f"release still serving cannot write ({details}): during the rolling restart "
                "its inserts would fail. Give the field a db_default (or make it nullable).")
        self.stdout.write(json.dumps({"pending": len(pending), "irreversible": len(blocking)}))
