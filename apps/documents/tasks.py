"""Celery task for documents: takes an id, calls the service; the retry policy lives here.

Outcomes become task states (apps/documents/delivery.py): done is SUCCESS ("done"), a skipped
redelivery of a finished document SUCCESS ("skipped"), failed is FAILURE (DocumentFailed), and
a run whose claim was taken by a later run is REJECTED (ClaimSuperseded, not acked in Redis).
"""

from __future__ import annotations

import os

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from celery_conf import names

from .delivery import ClaimSuperseded, DocumentFailed
from .models import Document, DocumentRun
from .processing import TransientProcessingError
from .services import document_process


@shared_task(
    name=names.DOCUMENT_PROCESS,
    bind=True,
    Request="apps.documents.delivery:DocumentRequest",
    # The database unreachable (a PostgreSQL restart, a network cut to its host) is transient
    # too: the retry's claim supersedes the run the error cut short.
    autoretry_for=(TransientProcessingError, OperationalError, InterfaceError),
    max_retries=settings.DOCUMENTS_MAX_RETRIES,
    retry_backoff=settings.DOCUMENTS_RETRY_BACKOFF,
    retry_backoff_max=300,
    retry_jitter=False,
)
def process_document(self, document_id: int) -> str:  # type: ignore[no-untyped-def]
    delivery = self.request.delivery_info or {}
    outcome = document_process(
        document_id=document_id,
        task_id=self.request.id,
        worker=self.request.hostname or "",
        pid=os.getpid(),
        redelivered=bool(delivery.get("redelivered")),
        final_attempt=self.request.retries >= self.max_retries,
    )
    if outcome == DocumentRun.Outcome.FAILED:
        reason = Document.objects.filter(pk=document_id).values_list(
            "failure_reason", flat=True).first()
        raise DocumentFailed(f"document {document_id} failed: {reason}")
    if outcome == DocumentRun.Outcome.SUPERSEDED:
        raise ClaimSuperseded(f"document {document_id}: the claim moved to a later run")
    return str(outcome)
