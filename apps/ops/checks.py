"""System check: every piece of in-process state is classified, and every classification is live."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register

from .audit.report import PROJECT_PACKAGES, load_registry, run_audit


@register("platform")
def state_audit_check(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    audit = run_audit(settings.BASE_DIR, PROJECT_PACKAGES, load_registry())
    errors = [
        Error(
            f"Unclassified in-process state: {f.symbol} ({f.kind}) at {f.path}:{f.line}",
            hint="Classify it in apps/state_registry.py: the coordination it needs and the "
                 "mechanism that serves it (or why it needs none). See `manage.py audit_state`.",
            id="platform.E001",
        )
        for f in audit.unclassified
    ]
    errors += [
        Error(
            f"Classified state no longer exists: {e.symbol} in {e.path}",
            hint="Remove or update its entry in apps/state_registry.py.",
            id="platform.E002",
        )
        for e in audit.stale
    ]
    return errors
