"""Views that belong to no one system: health for monitors."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from .health import platform_readiness


@never_cache
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """This web worker answers. Touches neither the database nor Redis."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    """200 when the database, Redis (persisting), a worker, a leading beat and the queues are
    fine; 503 with the failing checks otherwise."""
    report = platform_readiness()
    return JsonResponse(report, status=200 if report["ready"] else 503)
