"""Celery task for documents: takes an id, calls the service; the retry policy lives here."""

from __future__ import annotations

import os

from celery import shared_task
from django.conf import settings

from celery_conf import names

from .processing import TransientProcessingError
from .services import document_process


@shared_task(
    name=names.DOCUMENT_PROCESS,
    bind=True,
    autoretry_for=(TransientProcessingError,),
    max_retries=settings.DOCUMENTS_MAX_RETRIES,
    retry_backoff=settings.DOCUMENTS_RETRY_BACKOFF,
    retry_backoff_max=300,
    retry_jitter=False,
)
def process_document(self, document_id: int) -> str:  # type: ignore[no-untyped-def]
    delivery = self.request.delivery_info or {}
    return document_process(
        document_id=document_id,
        task_id=self.request.id,
        worker=self.request.hostname or "",
        pid=os.getpid(),
        redelivered=bool(delivery.get("redelivered")),
        final_attempt=self.request.retries >= self.max_retries,
    )
