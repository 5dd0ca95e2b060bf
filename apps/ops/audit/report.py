"""Compares what the scanner finds with the declared registry, and renders the result."""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .registry import Classified
from .scanner import Finding, scan

# The project's own code: every package whose processes run in production.
PROJECT_PACKAGES = ("apps", "celery_conf", "scheduler", "config")
PROJECT_REGISTRY = "apps.state_registry"
ADR_BEGIN, ADR_END = "<!-- audit_state:begin -->", "<!-- audit_state:end -->"


@dataclass(frozen=True)
class Audit:
    rows: list[tuple[Finding, Classified | None]]
    stale: list[Classified]  # classifications whose state no longer exists

    @property
    def unclassified(self) -> list[Finding]:
        return [finding for finding, entry in self.rows if entry is None]

    @property
    def ok(self) -> bool:
        return not self.unclassified and not self.stale


def load_registry(module: str = PROJECT_REGISTRY) -> list[Classified]:
    return list(importlib.import_module(module).REGISTRY)


def run_audit(root: Path, packages: Sequence[str], registry: list[Classified]) -> Audit:
    findings = scan(root, packages)
    by_key = {entry.key: entry for entry in registry}
    found_keys = {finding.key for finding in findings}
    return Audit(
        rows=[(finding, by_key.get(finding.key)) for finding in findings],
        stale=[entry for entry in registry if entry.key not in found_keys],
    )


def as_table(audit: Audit) -> str:
    lines = [f"{'where':<44} {'symbol':<40} {'kind':<30} coordination / mechanism"]
    for finding, entry in audit.rows:
        where = f"{finding.path}:{finding.line}"
        what = f"{entry.coordination}: {entry.mechanism}" if entry else "UNCLASSIFIED"
        lines.append(f"{where:<44} {finding.symbol:<40} {finding.kind:<30} {what}")
    for entry in audit.stale:
        lines.append(f"{entry.path:<44} {entry.symbol:<40} {'(gone)':<30} STALE classification")
    lines.append(f"\n{len(audit.rows)} findings, {len(audit.unclassified)} unclassified, "
                 f"{len(audit.stale)} stale classifications")
    return "\n".join(lines)


def as_markdown(audit: Audit) -> str:
    """The table the ADR carries: no line numbers, so it changes only when the state does."""
    lines = ["| file | state | kind | coordination | mechanism, or why none is needed |",
             "|---|---|---|---|---|"]
    seen: set[tuple[str, str]] = set()
    for finding, entry in audit.rows:
        if finding.key in seen:
            continue
        seen.add(finding.key)
        coordination = entry.coordination if entry else "**unclassified**"
        mechanism = entry.mechanism if entry else ""
        lines.append(f"| `{finding.path}` | `{finding.symbol}` | {finding.kind} | "
                     f"{coordination} | {mechanism} |")
    return "\n".join(lines)


def as_json(audit: Audit) -> str:
    return json.dumps({
        "findings": [
            {"path": f.path, "line": f.line, "symbol": f.symbol, "kind": str(f.kind),
             "coordination": str(e.coordination) if e else None,
             "mechanism": e.mechanism if e else None}
            for f, e in audit.rows
        ],
        "stale": [{"path": e.path, "symbol": e.symbol} for e in audit.stale],
    }, indent=2)


def replace_adr_table(adr: Path, table: str) -> bool:
    """Rewrite the generated table between the markers; returns whether it changed."""
    text = adr.read_text()
    head, rest = text.split(ADR_BEGIN, 1)
    _, tail = rest.split(ADR_END, 1)
    new = f"{head}{ADR_BEGIN}\n{table}\n{ADR_END}{tail}"
    if new != text:
        adr.write_text(new)
    return new != text
