"""Read the platform's environment file so a bare ``manage.py`` command talks to the running box.

``platform/up`` writes ``var/platform.env`` (development) and ``platform/install`` writes
``/etc/platform/platform.env`` (production): ``KEY=VALUE`` lines, no shell expansion. Loaded
by ``manage.py`` before Django starts; a variable already in the environment wins, so tests and
one-off overrides keep working. Imports nothing from Django or the platform.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

ENV_FILE_VARIABLE = "PLATFORM_ENV_FILE"
ENV_FILE_NAME = "platform.env"


class EnvFileError(Exception):
    pass


def env_file_path(*, root: Path, environ: MutableMapping[str, str]) -> Path:
    """``$PLATFORM_ENV_FILE``, else ``platform.env`` in ``$PLATFORM_VAR_DIR`` (default var/)."""
    if environ.get(ENV_FILE_VARIABLE):
        return Path(environ[ENV_FILE_VARIABLE])
    return Path(environ.get("PLATFORM_VAR_DIR") or root / "var") / ENV_FILE_NAME


def parse_env_file(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.removeprefix("export ").strip()
        if not sep or not key.isidentifier():
            raise EnvFileError(f"line {number}: expected KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
    return values


def env_file_load(*, root: Path, environ: MutableMapping[str, str] = os.environ) -> Path | None:
    """Fill unset variables from the environment file; the file used, or None if there is none.

    Raises EnvFileError when the file exists but cannot be read or parsed.
    """
    path = env_file_path(root=root, environ=environ)
    explicit = bool(environ.get(ENV_FILE_VARIABLE))
    try:
        text = path.read_text()
    except FileNotFoundError:
        if explicit:
            raise EnvFileError(f"{ENV_FILE_VARIABLE} names {path}, which does not exist") from None
        return None
    except PermissionError:
        raise EnvFileError(
            f"cannot read {path}: it holds the platform's secrets and only root and the "
            "platform's user may read it (use sudo)") from None
    try:
        values = parse_env_file(text)
    except EnvFileError as exc:
        raise EnvFileError(f"{path}: {exc}") from None
    for key, value in values.items():
        environ.setdefault(key, value)
    return path
