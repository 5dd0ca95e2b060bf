"""Views that belong to no one system: the CSRF failure answer."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.csrf import csrf_failure as django_csrf_failure

from .http import json_error


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    if request.path.startswith("/api/"):
        return json_error(
            403, f"CSRF check failed ({reason}). Send the csrftoken cookie's value as X-CSRFToken."
        )
    return django_csrf_failure(request, reason=reason)
