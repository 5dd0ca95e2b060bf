"""The live chart page and its per-connection sample stream."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from apps.ops.http import json_error

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


@require_GET
async def telemetry_stream_view(request: HttpRequest) -> HttpResponse:
    user = await request.auser()
    if not user.is_authenticated:
        response = json_error(401, "Log in first (session cookie required).")
        response["WWW-Authenticate"] = 'Session realm="platform"'
        return response
    try:
        rate = rate_from_query(request.GET)
    except StreamParamError as exc:
        return json_error(400, str(exc))
    response = StreamingHttpResponse(
        telemetry_stream(rate_hz=rate, max_seconds=settings.TELEMETRY_STREAM_MAX_S,
                         retry_ms=settings.TELEMETRY_RETRY_MS),
        content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each sample through at once
    return response
