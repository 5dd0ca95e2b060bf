"""The user's own usage: a small page and its JSON."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from apps.http import api_login_required

from .selectors import usage_get


@login_required
@require_GET
def usage_page(request: HttpRequest) -> HttpResponse:
    return render(request, "metering/usage.html", {"usage": usage_get(user_id=request.user.pk)})


@api_login_required
@require_GET
def usage_api(request: HttpRequest) -> HttpResponse:
    return JsonResponse(usage_get(user_id=request.user.pk).as_dict())
