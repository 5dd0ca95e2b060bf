"""Put failed documents back in the queue."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.documents.models import Document
from apps.documents.services import documents_requeue_failed


class Command(BaseCommand):
    help = "Requeue failed documents (all of them, or those given by id)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ids", nargs="*", type=int, help="document ids (default: all failed)")
        parser.add_argument("--dry-run", action="store_true", help="list, change nothing")

    def handle(self, *args: Any, ids: list[int], dry_run: bool, **options: Any) -> None:
        failed = Document.objects.filter(state=Document.State.FAILED)
        if ids:
            found = set(failed.filter(pk__in=ids).values_list("pk", flat=True))
            missing = sorted(set(ids) - found)
            if missing:
                raise CommandError(f"not failed documents (or no such id): {missing}")
        candidates = failed.filter(pk__in=ids) if ids else failed
        if dry_run:
            for doc in candidates:
                self.stdout.write(f"would requeue {doc.pk}: {doc.title} ({doc.failure_reason})")
            return
        requeued = documents_requeue_failed(document_ids=ids or None)
        self.stdout.write(self.style.SUCCESS(f"requeued {len(requeued)} document(s): {requeued}"))
