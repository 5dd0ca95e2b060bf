"""The live chart page and its per-connection sample stream."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from apps.http import json_error


@login_required
@require_GET
def telemetry_page(request: HttpRequest) -> HttpResponse:
    return render(request, "telemetry/page.html", {
        "rate_hz": settings.TELEMETRY_RATE_HZ,
        "min_rate_hz": settings.TELEMETRY_MIN_RATE_HZ,
        "max_rate_hz": settings.TELEMETRY_MAX_RATE_HZ,
        "busy_retry_s": settings.TELEMETRY_BUSY_RETRY_S,
    })


def telemetry_stream_view(request: HttpRequest) -> HttpResponse:
    """Only reached when the server bypasses ``config.asgi`` (whose front serves the stream)."""
    return json_error(503, "Streams are served by the ASGI application in config.asgi.")
