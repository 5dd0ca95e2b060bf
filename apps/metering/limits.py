"""The daily limit as a decorator on a submit view: count the call first, refuse past the limit.

A call is counted before the view runs (so two workers cannot both let the last one through)
and given back when the view answers 4xx or 5xx, so refused input and an unavailable queue
cost the user nothing: the counter equals the submissions accepted today.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from apps.http import json_error

from .days import next_reset, seconds_to_reset
from .services import MeteringUnavailable, Ticket, usage_give_back, usage_take

log = logging.getLogger(__name__)

View = Callable[..., HttpResponse]
UNAVAILABLE = "Usage metering is unavailable; nothing was saved. Try again."


def limit_message() -> str:
    limit = settings.METERING_DAILY_LIMIT
    return (f"Daily limit reached: {limit} document submissions per day. It resets at "
            f"00:00 UTC ({next_reset():%Y-%m-%d %H:%M} UTC); nothing was saved.")


def _page(request: HttpRequest, message: str, status: int) -> HttpResponse:
    # What the refused form held, shown to copy: nothing of it was saved.
    typed = {"title": request.POST.get("title", ""), "text": request.POST.get("text", "")}
    return render(request, "metering/limit_reached.html", {"message": message, "typed": typed},
                  status=status)


def _refused(request: HttpRequest, *, page: bool) -> HttpResponse:
    if page:
        response = _page(request, limit_message(), 429)
    else:
        response = JsonResponse({
            "error": limit_message(),
            "limit": settings.METERING_DAILY_LIMIT,
            "resets_at": next_reset().isoformat(),
        }, status=429)
    response["Retry-After"] = str(seconds_to_reset())
    return response


def _unavailable(request: HttpRequest, *, page: bool) -> HttpResponse:
    if page:
        return _page(request, UNAVAILABLE, 503)
    return json_error(503, UNAVAILABLE)


def _give_back(ticket: Ticket) -> None:
    try:
        usage_give_back(ticket=ticket)
    except MeteringUnavailable as exc:
        # The answer is already decided; the user is over-counted by one until tomorrow.
        log.warning("usage of user %s not given back: %s", ticket.user_id, exc)


def daily_limit(*, page: bool) -> Callable[[View], View]:
    """Meter a view's POSTs. Put it inside the login decorator: it needs ``request.user``."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method != "POST":
                return view(request, *args, **kwargs)
            try:
                ticket = usage_take(user_id=request.user.pk)
            except MeteringUnavailable:
                return _unavailable(request, page=page)
            if ticket is None:
                return _refused(request, page=page)
            try:
                response = view(request, *args, **kwargs)
            except BaseException:
                _give_back(ticket)
                raise
            if response.status_code >= 400:
                _give_back(ticket)
            return response

        return wrapper

    return decorate
