"""The scheduled backup: fired by the elected beat once per slot (scheduler/tables.py)."""

from __future__ import annotations

from celery import shared_task

from celery_conf import names

from .backups import backup_create


@shared_task(name=names.OPS_BACKUP)
def backup(slot: str | None = None, fired_by: str = "") -> str:
    taken = backup_create(slot=slot)
    return str(taken) if taken else "duplicate"
