"""The live-events page, its server-sent-event stream, and the staff broadcast."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST
from redis import RedisError

from apps.http import api_login_required, json_error

from .selectors import notifications_initial
from .services import BroadcastError, broadcast_send


@login_required
@require_GET
def notifications_page(request: HttpRequest) -> HttpResponse:
    initial = notifications_initial(user_id=request.user.pk)
    return render(request, "notifications/page.html", {"initial": initial})


@api_login_required
@require_GET
def notifications_api(request: HttpRequest) -> HttpResponse:
    return JsonResponse(notifications_initial(user_id=request.user.pk))


def event_stream_view(request: HttpRequest) -> HttpResponse:
    """Only reached when the server bypasses ``config.asgi`` (whose front serves the stream)."""
    return json_error(503, "Streams are served by the ASGI application in config.asgi.")


@require_POST
def broadcast_view(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return json_error(401, "Log in first (session cookie required).")
    if not request.user.is_staff:
        return json_error(403, "Only staff can broadcast.")
    try:
        broadcast_send(message=request.POST.get("message", ""),
                       sender=request.user.get_username())
    except BroadcastError as exc:
        messages.error(request, str(exc))
        return redirect("notifications:page")  # the page shows why; nothing was sent
    except (RedisError, OSError):
        messages.error(request, "The event bus is unavailable; nothing was sent. Try again.")
        return redirect("notifications:page")
    messages.success(request, "Broadcast sent.")
    return redirect("notifications:page")
