"""Create the development login that ``platform/up`` prints, once. Development only.

An existing user is left exactly as it is: no save, so a restart keeps its sessions (a new
password hash would end them), a password or flag changed in the admin, and publishes nothing
(a user save ends that user's streams through Redis, which is not up yet at this point).
"""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import check_password
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = ("Create the development superuser from DEV_USER / DEV_USER_PASSWORD if it does not "
            "exist; an existing one is never changed.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default=os.environ.get("DEV_USER", "dev"))

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        if not settings.DEBUG:
            raise CommandError("ensure_dev_user is for development only (DEBUG is off)")
        password = os.environ.get("DEV_USER_PASSWORD", "")
        if len(password) < 8:
            raise CommandError("set DEV_USER_PASSWORD (8 characters or more)")
        users = get_user_model()
        user = users.objects.filter(**{users.USERNAME_FIELD: username}).first()
        if user is None:
            # One INSERT: a created user has no sessions or streams to end.
            users.objects.create_superuser(username, email="", password=password)
            self.stdout.write(f"created development user {username!r}")
            return
        # hashers.check_password, not user.check_password: the latter re-saves an outdated hash.
        if check_password(password, user.password):
            self.stdout.write(f"development user {username!r} kept as it was")
        else:
            self.stdout.write(
                f"development user {username!r} kept as it was: its password was changed since "
                "var/dev.env was written, so log in with the new one (or run "
                f"`manage.py changepassword {username}`)")
