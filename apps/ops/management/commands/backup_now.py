"""Take a backup now, outside the schedule (e.g. before an upgrade)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from apps.ops.backups import backup_create


class Command(BaseCommand):
    help = "Back up the database and Redis's append-only files now; keeps the newest BACKUP_KEEP."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(str(backup_create()))
