"""Error answers: JSON ``{"error": ...}`` for the API, a page in the site's layout otherwise.

One rule decides which (``wants_html``), shared with the body limit in front of Django
(apps/ops/limits.py): the API's paths always get JSON; other paths get a page when the client
accepts HTML (a browser), JSON otherwise (curl, scripts). Django's handlers (config/urls.py)
and the CSRF failure view use it; ``ErrorPagesMiddleware`` applies it in development too,
where DEBUG would otherwise show Django's technical 404 page, and to bare error responses
(a 405 has no body). A 500 on a page under DEBUG keeps Django's traceback page: that is what
a developer wants, and the customer box (DEBUG off) never shows it.
Shared plumbing: imports nothing of the apps.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.urls import Resolver404, resolve
from django.utils.log import log_response

log = logging.getLogger("django.request")

API_PREFIX = "/api/"


def title_of(status: int) -> str:
    match status:
        case 400:
            return "Bad request"
        case 401:
            return "Not logged in"
        case 403:
            return "Not allowed"
        case 404:
            return "Not found"
        case 405:
            return "Method not allowed"
        case 413:
            return "Too large"
        case 500:
            return "Server error"
        case _:
            return f"Error {status}"


def wants_html(path: str, accept: str) -> bool:
    return not path.startswith(API_PREFIX) and "text/html" in accept


def error_html(status: int, message: str, *, request: HttpRequest | None = None,
               back: bool = False) -> str:
    """The error page. Without ``request`` (a 500, the body limit in front of Django) it
    renders with no user or session, so nothing that failed can fail it again."""
    context = {"status": status, "title": title_of(status), "message": message, "back": back}
    return render_to_string("errors/error.html", context, request=request)


def error_response(request: HttpRequest, status: int, message: str, *,
                   with_request: bool = True, back: bool = False) -> HttpResponse:
    if not wants_html(request.path, request.headers.get("Accept", "")):
        response: HttpResponse = JsonResponse({"error": message}, status=status)
    else:
        html = error_html(status, message, request=request if with_request else None, back=back)
        response = HttpResponse(html, status=status)
    response.error_page = True  # type: ignore[attr-defined]  # not replaced again below
    return response


def _said(exception: BaseException | None, default: str) -> str:
    """The exception's own sentence when a view gave one (``Http404("No such document.")``);
    Django's internal ones (a resolver's dict, a SuspiciousOperation's detail) stay out."""
    if isinstance(exception, Http404 | PermissionDenied) and exception.args:
        said = exception.args[0]
        if isinstance(said, str) and said:
            return said
    return default


def bad_request(request: HttpRequest, exception: BaseException | None = None) -> HttpResponse:
    return error_response(request, 400, "The request was malformed; nothing was changed.")


def permission_denied(request: HttpRequest,
                      exception: BaseException | None = None) -> HttpResponse:
    return error_response(request, 403, _said(
        exception, "You are not allowed to do this; nothing was changed."))


def page_not_found(request: HttpRequest, exception: BaseException | None = None) -> HttpResponse:
    return error_response(request, 404, _said(exception, f"There is nothing at {request.path}."))


def server_error(request: HttpRequest) -> HttpResponse:
    return error_response(request, 500, (
        "Something went wrong on the server; the error is in its log. Try again in a moment."),
        with_request=False)


def method_not_allowed(request: HttpRequest) -> HttpResponse:
    return error_response(request, 405, f"{request.method} is not accepted here.")


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    if request.path.startswith(API_PREFIX):
        return error_response(request, 403, (
            f"CSRF check failed ({reason}). Log in first, then send the csrftoken cookie's "
            "value as X-CSRFToken."))
    return error_response(request, 403, (
        "The form's security token was missing or out of date, so nothing was changed. "
        "Go back, reload the page and send it again."), back=True)


def _exception_response(request: HttpRequest, exception: Exception) -> HttpResponse | None:
    if isinstance(exception, Http404):
        return page_not_found(request, exception)
    if isinstance(exception, PermissionDenied):
        return permission_denied(request, exception)
    if isinstance(exception, BadRequest | SuspiciousOperation):
        return bad_request(request, exception)
    if settings.DEBUG and request.path.startswith(API_PREFIX):
        # Under DEBUG Django would answer an API client with an HTML traceback.
        log.error("Internal Server Error: %s", request.path, exc_info=sys.exc_info(),
                  extra={"status_code": 500, "request": request})
        return server_error(request)
    return None  # Django's handler: server_error above, or the debug page in development


class ErrorPagesMiddleware:
    """Error answers by ``wants_html`` whatever DEBUG says. Sync only: Django runs as its WSGI
    handler here (apps/django_pool.py, adr/0045), so nothing calls a middleware async."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not _resolves(request):
            return self._logged(request, page_not_found(request))
        return self._fill_bare(request, self.get_response(request))

    def process_exception(self, request: HttpRequest,
                          exception: Exception) -> HttpResponse | None:
        response = _exception_response(request, exception)
        return response if response is None else self._logged(request, response)

    @staticmethod
    def _logged(request: HttpRequest, response: HttpResponse) -> HttpResponse:
        log_response("%s: %s", response.reason_phrase, request.path, response=response,
                     request=request)
        return response

    @staticmethod
    def _fill_bare(request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if not _bare_error(response):
            return response
        page = (method_not_allowed(request) if response.status_code == 405
                else error_response(request, response.status_code, title_of(
                    response.status_code) + "."))
        for name in ("Allow", "Retry-After", "WWW-Authenticate"):
            if name in response:
                page[name] = response[name]
        return page


def _resolves(request: HttpRequest) -> bool:
    try:
        resolve(request.path_info, getattr(request, "urlconf", None))
    except Resolver404:
        return False
    return True


def _bare_error(response: Any) -> bool:
    """An error answer with nothing in it for a person (405, a view's bare ``status=``)."""
    return (response.status_code >= 400 and not getattr(response, "streaming", False)
            and not getattr(response, "error_page", False) and not response.content)
