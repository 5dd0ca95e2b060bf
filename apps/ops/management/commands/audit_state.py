"""Find in-process state in the project's code and show how each piece is classified."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.ops.audit.report import (
    PROJECT_PACKAGES,
    PROJECT_REGISTRY,
    as_json,
    as_markdown,
    as_table,
    load_registry,
    replace_adr_table,
    run_audit,
)

RENDER = {"table": as_table, "markdown": as_markdown, "json": as_json}


class Command(BaseCommand):
    help = "Audit in-process state: list each finding with its coordination class."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--format", choices=sorted(RENDER), default="table")
        parser.add_argument("--output", type=Path, help="write to this file instead of stdout")
        parser.add_argument("--write-adr", type=Path, metavar="ADR",
                            help="rewrite the generated table between the markers in this ADR")
        parser.add_argument("--root", type=Path, default=None, help="source root to scan")
        parser.add_argument("--package", action="append", dest="packages",
                            help="package under the root to scan (repeatable)")
        parser.add_argument("--registry", default=PROJECT_REGISTRY,
                            help="module whose REGISTRY classifies the findings")

    def handle(self, *args: Any, **opts: Any) -> None:
        root = opts["root"] or Path(settings.BASE_DIR)
        if not root.is_dir():
            raise CommandError(f"no such directory: {root}")
        try:
            registry = load_registry(opts["registry"])
        except (ImportError, AttributeError) as exc:
            raise CommandError(f"cannot load registry {opts['registry']!r}: {exc}") from exc
        audit = run_audit(root, opts["packages"] or PROJECT_PACKAGES, registry)
        text = RENDER[opts["format"]](audit)
        if opts["output"]:
            opts["output"].write_text(text + "\n")
        else:
            self.stdout.write(text)
        if opts["write_adr"]:
            changed = replace_adr_table(opts["write_adr"], as_markdown(audit))
            self.stderr.write(f"{opts['write_adr']}: {'updated' if changed else 'unchanged'}")
        if not audit.ok:
            raise CommandError(f"{len(audit.unclassified)} unclassified finding(s), "
                               f"{len(audit.stale)} stale classification(s)")
