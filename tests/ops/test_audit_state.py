"""The state audit finds each kind of in-process state, classifies it, and guards new state."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.ops.audit.registry import Classified, Coordination
from apps.ops.audit.report import (
    ADR_BEGIN,
    ADR_END,
    PROJECT_PACKAGES,
    as_markdown,
    load_registry,
    run_audit,
)
from apps.ops.audit.scanner import Kind, scan
from apps.ops.checks import state_audit_check
from tests.procs import ROOT

FIXTURES = Path(__file__).parent / "fixture_apps"
ADR = ROOT / "adr" / "0009-enforce-the-state-audit-with-a-system-check.md"


def test_each_kind_of_state_is_found_in_the_fixture_app():
    found = {(f.path, f.symbol): f.kind for f in scan(FIXTURES, ["stateful"])}
    s, a = "stateful/state.py", "stateful/apps.py"
    assert found == {
        (s, "SUBSCRIBERS"): Kind.MODULE_MUTABLE,
        (s, "USAGE"): Kind.MODULE_MUTABLE,
        (s, "PENDING"): Kind.QUEUE,
        (s, "RECENT"): Kind.QUEUE,
        (s, "refresher"): Kind.THREAD,
        (s, "<module>:Thread"): Kind.THREAD,
        (s, "Registry.handlers"): Kind.CLASS_MUTABLE,
        (s, "lookup"): Kind.CACHE,
        (s, "_client"): Kind.SINGLETON,
        (s, "ticker"): Kind.STREAM,
        (a, "ready:Thread"): Kind.THREAD,
        (a, "ready:scheduler"): Kind.SCHEDULER,
    }


def test_constants_raise_no_false_alarm():
    assert scan(FIXTURES, ["clean"]) == []


def test_unclassified_and_stale_entries_are_reported():
    audit = run_audit(FIXTURES, ["stateful"], load_registry("tests.ops.fixture_apps.registry"))
    assert [f.symbol for f in audit.unclassified] == ["USAGE"]
    assert [e.symbol for e in audit.stale] == ["GONE"]
    classified = {f.symbol: e.coordination for f, e in audit.rows if e}
    assert classified["SUBSCRIBERS"] == Coordination.BROADCAST
    assert classified["PENDING"] == Coordination.DURABLE_QUEUE
    assert not audit.ok


def test_command_prints_the_table_and_fails_on_unclassified_state(tmp_path):
    out = io.StringIO()
    with pytest.raises(CommandError, match="1 unclassified finding"):
        call_command("audit_state", root=FIXTURES, packages=["stateful"],
                     registry="tests.ops.fixture_apps.registry", stdout=out)
    assert "USAGE" in out.getvalue() and "UNCLASSIFIED" in out.getvalue()
    assert "STALE classification" in out.getvalue()
    target = tmp_path / "audit.json"
    with pytest.raises(CommandError):
        call_command("audit_state", root=FIXTURES, packages=["stateful"], format="json",
                     output=target, registry="tests.ops.fixture_apps.registry")
    assert '"symbol": "USAGE"' in target.read_text()


def test_the_project_has_no_unclassified_state_and_the_check_passes():
    audit = run_audit(ROOT, PROJECT_PACKAGES, load_registry())
    assert audit.unclassified == [] and audit.stale == []
    assert state_audit_check() == []


def test_new_state_in_the_project_fails_the_system_check(tmp_path, monkeypatch):
    # A copy of the project's apps package with one new module-level dict.
    import shutil

    shutil.copytree(ROOT / "apps", tmp_path / "apps")
    for package in PROJECT_PACKAGES[1:]:
        (tmp_path / package).symlink_to(ROOT / package)
    (tmp_path / "apps" / "documents" / "cache.py").write_text("SEEN = {}\n")
    monkeypatch.setattr("django.conf.settings.BASE_DIR", tmp_path)
    errors = state_audit_check()
    assert [e.id for e in errors] == ["platform.E001"]
    assert "SEEN" in errors[0].msg and "apps/documents/cache.py" in errors[0].msg


def test_a_classification_of_removed_state_fails_the_system_check(monkeypatch):
    extra = Classified("apps/documents/gone.py", "CACHE", Coordination.NONE, "was removed")
    monkeypatch.setattr("apps.ops.checks.load_registry", lambda: [*load_registry(), extra])
    assert [e.id for e in state_audit_check()] == ["platform.E002"]


def test_the_adr_table_is_the_command_output():
    text = ADR.read_text()
    table = text.split(ADR_BEGIN, 1)[1].split(ADR_END, 1)[0].strip()
    assert table == as_markdown(run_audit(ROOT, PROJECT_PACKAGES, load_registry()))


def test_manage_py_check_runs_the_audit(tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, text=True,
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    from django.core.checks.registry import registry

    assert state_audit_check in registry.get_checks()
