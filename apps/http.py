"""Small HTTP helpers shared by the apps' JSON endpoints (JSON errors, the API login guard).

Shared plumbing: it imports nothing of the apps, so any app (and ops) may import it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponse, JsonResponse


def json_error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _unauthenticated() -> JsonResponse:
    response = json_error(401, "Log in first (session cookie required).")
    response["WWW-Authenticate"] = 'Session realm="platform"'
    return response


def api_login_required(view: Callable[..., Any]) -> Callable[..., Any]:
    """Like login_required, but answers 401 JSON instead of redirecting to a login page.

    Works on sync views and on async ones (server-sent-event streams), where the user is
    loaded with ``auser()`` so the event loop never blocks on the session store.
    """
    if iscoroutinefunction(view):

        @wraps(view)
        async def async_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not (await request.auser()).is_authenticated:
                return _unauthenticated()
            return await view(request, *args, **kwargs)

        return async_wrapper

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return _unauthenticated()
        return view(request, *args, **kwargs)

    return wrapper
