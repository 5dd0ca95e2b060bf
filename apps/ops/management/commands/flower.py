"""Start Flower with task events on only while someone views it (apps/ops/flower_gate.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tornado.options import options as tornado_options

from apps.ops.flower_gate import ViewerGate, watch_viewers
from celery_conf import app


def url_prefix() -> str:
    """Flower's documented ``--url_prefix`` (FLOWER_URL_PREFIX), once Flower has parsed it."""
    return getattr(tornado_options, "url_prefix", None) or ""


class Command(BaseCommand):
    help = ("Run Flower (basic auth from FLOWER_BASIC_AUTH) with the workers' task events on "
            "only while someone views it; FLOWER_VIEWER_IDLE_S sets how long after the last "
            "view they stay on.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--address", default="127.0.0.1",
                            help="address to listen on (default: loopback only)")
        parser.add_argument("--port", type=int, default=5555, help="port (default: 5555)")

    def handle(self, *args: Any, address: str, port: int, **options: Any) -> None:
        if not 0 < port < 65536:
            raise CommandError(f"--port must be 1-65535, got {port}")
        watch_viewers(ViewerGate(idle_seconds=settings.FLOWER_VIEWER_IDLE_S), app.control,
                      url_prefix=url_prefix)
        # Flower's own command from here on: options from FLOWER_* variables, SIGTERM handling.
        # --enable_events=False: Flower never sends enable_events itself (the command line
        # wins over FLOWER_ENABLE_EVENTS and a flowerconfig.py); the switch above does.
        app.start(["flower", f"--address={address}", f"--port={port}", "--enable_events=False"])
