"""Which kind of platform process this is (web, worker, beat, flower, manage), from how it was
started, so the database connections of each kind can be told apart and counted."""

from __future__ import annotations

from pathlib import Path

KINDS = ("web", "worker", "beat", "flower", "manage")
CELERY_COMMANDS = ("worker", "beat", "flower")


def process_kind(argv: list[str]) -> str:
    """``web`` for uvicorn (its worker processes inherit the parent's argv through
    multiprocessing's spawn), the Celery sub-command for ``celery`` (a prefork pool child is a
    fork of its worker), ``flower`` or ``manage`` for manage.py, else the program's name."""
    program = Path(argv[0]).name if argv else ""
    if program == "uvicorn":
        return "web"
    if program in ("celery", "__main__.py"):
        return next((arg for arg in argv[1:] if arg in CELERY_COMMANDS), "celery")
    if program == "manage.py":
        return "flower" if argv[1:2] == ["flower"] else "manage"
    return program.removesuffix(".py") or "python"
