"""What platform/up prints comes from the files the running platform's start wrote, never from
the shell running it now (the real script: tests/platform/test_up.py)."""

from __future__ import annotations

from pathlib import Path

from apps.ops import up_state
from tests.procs import ROOT


def write_start_files(var: Path, *, venv: str) -> None:
    var.mkdir()
    (var / "dev.env").write_text("DEV_USER=dev\nDEV_USER_PASSWORD=from-dev-env\n")
    (var / "platform.env").write_text(
        "PLATFORM_ROLES=web,workers,beat,flower,data\nPLATFORM_HOST_NAME=box\n"
        "REDIS_URL=redis://:secret@127.0.0.1:7001/0\nFLOWER_BASIC_AUTH=admin:flower-pw\n"
        f"WEB_HOST=127.0.0.1\nWEB_PORT=7002\nFLOWER_PORT=7003\nVENV={venv}\n")


def test_the_banner_prints_the_started_platforms_addresses_and_interpreter(
        tmp_path, monkeypatch):
    monkeypatch.setenv("WEB_PORT", "8000")  # the current shell's: ignored
    write_start_files(tmp_path / "var", venv="/opt/elsewhere/venv")
    text = up_state.banner(tmp_path / "var")
    assert "http://127.0.0.1:7002/         log in as dev / from-dev-env" in text
    assert "http://127.0.0.1:7003/     user admin / flower-pw" in text
    assert "127.0.0.1:7001/0 (password" in text and "secret" not in text
    status = "/opt/elsewhere/venv/bin/python manage.py status"
    assert f"PLATFORM_VAR_DIR={tmp_path / 'var'} {status}" in text
    assert "/opt/elsewhere/venv/bin/supervisorctl -s unix://" in text
    assert ":8000" not in text


def test_a_venv_in_the_checkout_is_printed_relative_and_var_needs_no_prefix(tmp_path):
    assert up_state.typed_path(ROOT / ".venv" / "bin" / "python") == ".venv/bin/python"
    assert up_state.typed_path(Path("/opt/v/bin/python")) == "/opt/v/bin/python"


def test_nothing_answering_on_the_socket_is_not_running(tmp_path):
    write_start_files(tmp_path / "var", venv="/opt/elsewhere/venv")
    (tmp_path / "var" / "supervisor.sock").write_text("")  # a stale file, nobody listening
    assert up_state.report(tmp_path / "var") == up_state.NOT_RUNNING


def test_ipv6_addresses_are_printed_in_brackets(tmp_path):
    # http://::1:7002/ is no address a browser or curl takes; ::1:7001/0 reads as port 7001
    # or as part of the address.
    var = tmp_path / "var"
    write_start_files(var, venv="/opt/elsewhere/venv")
    text = (var / "platform.env").read_text().replace("WEB_HOST=127.0.0.1", "WEB_HOST=::1")
    (var / "platform.env").write_text(text.replace("@127.0.0.1:7001", "@[::1]:7001"))
    banner = up_state.banner(var)
    assert "http://[::1]:7002/         log in as dev" in banner
    assert " [::1]:7001/0 (password" in banner
