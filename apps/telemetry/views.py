"""The live chart page and its per-connection sample stream."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from apps.ops.http import api_login_required, json_error
from apps.sse import sse_response

from .inputs import StreamParamError, rate_from_query
from .stream import telemetry_stream


@login_required
@require_GET
def telemetry_page(request: HttpRequest) -> HttpResponse:
    return render(request, "telemetry/page.html", {
        "rate_hz": settings.TELEMETRY_RATE_HZ,
        "min_rate_hz": settings.TELEMETRY_MIN_RATE_HZ,
        "max_rate_hz": settings.TELEMETRY_MAX_RATE_HZ,
    })


@api_login_required
@require_GET
async def telemetry_stream_view(request: HttpRequest) -> HttpResponse:
    try:
        rate = rate_from_query(request.GET)
    except StreamParamError as exc:
        return json_error(400, str(exc))
    return sse_response(
        telemetry_stream(rate_hz=rate, max_seconds=settings.TELEMETRY_STREAM_MAX_S,
                         retry_ms=settings.TELEMETRY_RETRY_MS))
