"""Celery task for documents: takes an id, calls the service; the retry policy lives here.

Outcomes become task states (apps/documents/delivery.py): done is SUCCESS ("done"), a skipped
copy (a finished document, an older generation, or a live run holds it) SUCCESS ("skipped"),
failed is FAILURE (DocumentFailed), and a run whose claim was taken by a later run is REJECTED
(ClaimSuperseded).
"""

from __future__ import annotations

import logging
import os

from celery import shared_task
from celery.utils.time import get_exponential_backoff_interval
from django.conf import settings
from django.db import InterfaceError, OperationalError

from celery_conf import names
from celery_conf.heartbeat import worker_main_pid
from celery_conf.policy import MAX_RETRY_COUNTDOWN

from .delivery import ClaimSuperseded, DocumentFailed
from .models import Document, DocumentRun
from .processing import TransientProcessingError
from .services import GENERATION_HEADER, document_process

logger = logging.getLogger(__name__)


@shared_task(
    name=names.DOCUMENT_PROCESS,
    bind=True,
    # The database unreachable (a PostgreSQL restart, a network cut to its host) is transient
    # too: the retry's claim supersedes the run the error cut short.
    autoretry_for=(TransientProcessingError, OperationalError, InterfaceError),
    max_retries=settings.DOCUMENTS_MAX_RETRIES,
    retry_backoff=settings.DOCUMENTS_RETRY_BACKOFF,
    retry_backoff_max=MAX_RETRY_COUNTDOWN,
    retry_jitter=False,
)
def process_document(self, document_id: int) -> str:  # type: ignore[no-untyped-def]
    delivery = self.request.delivery_info or {}
    generation = (self.request.headers or {}).get(GENERATION_HEADER)
    outcome = document_process(
        document_id=document_id,
        generation=int(generation) if generation is not None else None,
        task_id=self.request.id,
        worker=self.request.hostname or "",
        worker_pid=worker_main_pid(),
        pid=os.getpid(),
        redelivered=bool(delivery.get("redelivered")),
        final_attempt=self.request.retries >= self.max_retries,
        # What autoretry's countdown will be (the policy on this decorator).
        retry_in_s=get_exponential_backoff_interval(
            factor=settings.DOCUMENTS_RETRY_BACKOFF, retries=self.request.retries,
            maximum=MAX_RETRY_COUNTDOWN, full_jitter=False),
    )
    if outcome == DocumentRun.Outcome.FAILED:
        reason = Document.objects.filter(pk=document_id).values_list(
            "failure_reason", flat=True).first()
        raise DocumentFailed(f"document {document_id} failed: {reason}")
    if outcome == DocumentRun.Outcome.SUPERSEDED:
        logger.warning("document %s: result dropped, the claim moved to a later run",
                       document_id)
        raise ClaimSuperseded(f"document {document_id}: the claim moved to a later run")
    return str(outcome)
