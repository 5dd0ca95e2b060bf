"""Print the platform's state: Redis and persistence, workers, queue depths, work in flight."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.humanize import duration_text, time_text
from apps.ops.status import platform_status


class Command(BaseCommand):
    help = "Show Redis and its persistence, live workers, queue depths and work in flight."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def handle(self, *args: Any, json: bool = False, **options: Any) -> None:
        report = platform_status()
        if json:
            self.stdout.write(_dumps(report))
        else:
            self.stdout.write(render(report))
        if "error" in report.get("redis", {}):
            raise CommandError(f"Redis unreachable: {report['redis']['error']}")


def _dumps(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, default=str)


def render(report: dict[str, Any]) -> str:
    lines: list[str] = []
    for name, section in report.items():
        lines.append(name.upper())
        if "error" in section:
            lines.append(f"  error: {section['error']}")
        elif name == "workers":
            lines.append(f"  alive: {section['alive']}")
            for w in section["workers"]:
                lines.append(
                    f"  {w['name']:<32} pid {w['pid']:<7} in flight {w['inflight']:<3} "
                    f"seen {duration_text(w['last_seen_s'])} ago"
                )
        else:
            for key, value in section.items():
                if isinstance(value, list):
                    lines.append(f"  {key}:")
                    lines += [f"    {item}" for item in value]
                else:
                    lines.append(f"  {key:<28} {_readable(key, value)}")
        lines.append("")
    return "\n".join(lines)


def _readable(key: str, value: Any) -> str:
    """Epoch times (``since``, ``*_at``) with their zone, seconds (``*_s``) with units; the
    data's names stay as they are (``--json`` prints the numbers)."""
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if numeric and (key == "since" or key.endswith("_at")):
        return time_text(value)
    if numeric and key.endswith("_s"):
        return duration_text(value)
    if value is None:
        return "none"
    return str(value)
