"""``{% load units %}``: apps/humanize.py's wording for templates (``|duration``, ``|size``)."""

from __future__ import annotations

from django import template

from apps.humanize import duration_text, size_text

register = template.Library()


@register.filter
def duration(seconds: float | None) -> str:
    return "" if seconds is None else duration_text(seconds)


@register.filter
def size(size_bytes: int | None) -> str:
    return "" if size_bytes is None else size_text(size_bytes)
