"""Restore a backup (database and Redis's append-only files) into this box's data paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.ops.backups import BackupError, backup_restore, backups_list


class Command(BaseCommand):
    help = ("Restore a backup made by the scheduled ops.backup job (or backup_now). Without "
            "a path, lists the backups. Stop the platform (and Redis) first.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("backup", nargs="?", help="a backup directory (backup-...)")
        parser.add_argument("--force", action="store_true", help="replace existing data")
        parser.add_argument("--no-redis", action="store_true",
                            help="restore the database only")

    def handle(self, *args: Any, backup: str | None = None, force: bool = False,
               no_redis: bool = False, **options: Any) -> None:
        if backup is None:
            for path in backups_list():
                self.stdout.write(str(path))
            return
        try:
            restored = backup_restore(backup=Path(backup), force=force, redis=not no_redis)
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(json.dumps(restored, indent=2))
