"""Reads for documents."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from .models import Document


def document_list(*, owner: AbstractBaseUser, limit: int = 100) -> QuerySet[Document]:
    return Document.objects.filter(owner=owner).defer("content")[:limit]


def document_get(*, owner: AbstractBaseUser, document_id: int) -> Document | None:
    return Document.objects.filter(owner=owner, pk=document_id).first()


def document_as_dict(document: Document) -> dict[str, Any]:
    return {
        "id": document.pk,
        "title": document.title,
        "state": document.state,
        "size_bytes": document.size_bytes,
        "starts": document.starts,
        "summary": document.summary,
        "word_count": document.word_count,
        "failure_reason": document.failure_reason,
        "created_at": document.created_at.isoformat(),
        "finished_at": document.finished_at.isoformat() if document.finished_at else None,
        "url": f"/documents/{document.pk}/",
    }
