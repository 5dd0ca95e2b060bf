"""Pages and the JSON endpoint for documents."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from apps.http import api_login_required, json_error
from apps.humanize import size_text
from apps.metering.limits import daily_limit

from .inputs import SubmissionError, submission_from_request
from .selectors import document_as_dict, document_get, document_list
from .services import QueueUnavailable, document_submit


def _submit(request: HttpRequest):  # type: ignore[no-untyped-def]
    submission = submission_from_request(request)
    return document_submit(
        owner=request.user,
        title=submission.title,
        content=submission.content,
        source=submission.source,
        filename=submission.filename,
    )


def _typed(request: HttpRequest) -> dict[str, str]:
    """What a refused form held, to fill it in again (a file cannot be: only its name)."""
    try:
        upload = request.FILES.get("file")
        return {"title": request.POST.get("title", ""), "text": request.POST.get("text", ""),
                "file": upload.name if upload is not None else ""}
    except (SuspiciousOperation, MultiPartParserError):
        return {}  # a body too large or malformed to read: nothing to give back


@login_required
@require_http_methods(["GET", "POST"])
@daily_limit(page=True)
def document_list_page(request: HttpRequest) -> HttpResponse:
    status = 200
    typed: dict[str, str] = {}
    if request.method == "POST":
        try:
            document = _submit(request)
        except SubmissionError as exc:
            messages.error(request, exc.message)
            status = exc.status
        except QueueUnavailable:
            messages.error(request, "The queue is unavailable; nothing was saved. Try again.")
            status = 503
        else:
            messages.success(request, f"“{document.title}” is queued.")
            return redirect("documents:list")
        typed = _typed(request)
    context = {
        "documents": document_list(owner=request.user),
        "max_bytes": settings.DOCUMENTS_MAX_BYTES,
        "max_size": size_text(settings.DOCUMENTS_MAX_BYTES),
        "typed": typed,
    }
    return render(request, "documents/list.html", context, status=status)


@login_required
def document_detail_page(request: HttpRequest, document_id: int) -> HttpResponse:
    document = document_get(owner=request.user, document_id=document_id)
    if document is None:
        raise Http404("No such document.")
    return render(request, "documents/detail.html", {"document": document})


@api_login_required
@require_http_methods(["GET", "POST"])
@daily_limit(page=False)
def documents_api(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        docs = [document_as_dict(d) for d in document_list(owner=request.user)]
        return JsonResponse({"documents": docs})
    try:
        document = _submit(request)
    except SubmissionError as exc:
        return json_error(exc.status, exc.message)
    except QueueUnavailable:
        return json_error(503, "The queue is unavailable; nothing was saved. Try again.")
    # 202: accepted and durable (row committed, message on Redis's disk), not yet processed.
    return JsonResponse(document_as_dict(document), status=202)


@api_login_required
@require_http_methods(["GET"])
def document_api(request: HttpRequest, document_id: int) -> HttpResponse:
    document = document_get(owner=request.user, document_id=document_id)
    if document is None:
        return json_error(404, "No such document.")
    return JsonResponse(document_as_dict(document))
