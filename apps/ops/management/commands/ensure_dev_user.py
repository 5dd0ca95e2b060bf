"""Create (or reset) the development login that ``platform/up`` prints. Development only."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Create or reset the development superuser from DEV_USER / DEV_USER_PASSWORD."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default=os.environ.get("DEV_USER", "dev"))

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        if not settings.DEBUG:
            raise CommandError("ensure_dev_user is for development only (DEBUG is off)")
        password = os.environ.get("DEV_USER_PASSWORD", "")
        if len(password) < 8:
            raise CommandError("set DEV_USER_PASSWORD (8 characters or more)")
        user, created = get_user_model().objects.get_or_create(username=username)
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        self.stdout.write(f"{'created' if created else 'updated'} development user {username!r}")
