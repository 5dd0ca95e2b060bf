"""Small HTTP helpers shared by the apps' JSON endpoints."""

from __future__ import annotations

from functools import wraps
from typing import Any, Callable

from django.http import HttpRequest, HttpResponse, JsonResponse


def json_error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def api_login_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Like login_required, but answers 401 JSON instead of redirecting to a login page."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            response = json_error(401, "Log in first (session cookie required).")
            response["WWW-Authenticate"] = 'Session realm="platform"'
            return response
        return view(request, *args, **kwargs)

    return wrapper
