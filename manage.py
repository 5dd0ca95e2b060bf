#!/usr/bin/env python
"""Django's command-line utility for administrative tasks.

Reads the platform's environment file first (apps/ops/envfile.py), so the commands printed by
``platform/up`` and ``platform/install`` work exactly as printed.
"""

import os
import sys
from pathlib import Path


def main() -> None:
    from apps.ops.envfile import EnvFileError, env_file_load

    try:
        env_file_load(root=Path(__file__).resolve().parent)
    except EnvFileError as exc:
        sys.exit(f"manage.py: {exc}")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.development")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
