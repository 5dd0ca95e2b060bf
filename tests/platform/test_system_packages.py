"""What a fresh Debian machine is given: ``ensure_system_packages`` asks for the venv module of
the interpreter that builds the virtual environment (not whichever python3 is on PATH), and
``platform/test`` names the package of every command the tests and the box run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.procs import ROOT

# Commands outside the virtual environment that the tests or the installed box run.
COMMANDS = ("redis-server", "systemd-analyze", "systemctl", "runuser", "setpriv", "useradd",
            "openssl", "chromium", "ip")


def run_lib(tmp_path: Path, script: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Source platform/lib.sh with apt-get and dpkg replaced by recorders (nothing installed)."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/apt.log\n')
    (fake / "dpkg").write_text("#!/bin/sh\nexit 1\n")  # no extra package is installed
    for tool in fake.iterdir():
        tool.chmod(0o755)
    # as_root without sudo: sudo's secure_path would find the real apt-get.
    return subprocess.run(["bash", "-c", f'. platform/lib.sh; as_root() {{ "$@"; }}; {script}'],
                          cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", **env})


def test_the_venv_module_asked_for_is_the_building_interpreters(tmp_path):
    # A Python 3.13 without ensurepip, as Debian ships it before python3.13-venv is installed.
    python = tmp_path / "python3.13"
    python.write_text('#!/bin/sh\ncase "$2" in *ensurepip*) exit 1;; *) echo 3.13;; esac\n')
    python.chmod(0o755)
    result = run_lib(tmp_path, "ensure_system_packages extra-pkg", SYSTEM_PYTHON=str(python))
    installs = [line for line in (tmp_path / "apt.log").read_text().splitlines()
                if line.startswith("install")]
    assert installs and installs[0].split()[-2:] == ["python3.13-venv", "extra-pkg"]
    # The package did not help (it is not the distribution's Python): a clear refusal.
    assert result.returncode == 1 and "cannot create a virtual environment" in result.stderr


def test_a_python_that_can_build_a_venv_needs_nothing(tmp_path):
    result = run_lib(tmp_path, "ensure_system_packages", SYSTEM_PYTHON="/usr/bin/python3")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "apt.log").exists()


def test_platform_test_installs_the_package_of_every_command_the_tests_run():
    ensured = {name for line in (ROOT / "platform/test").read_text().splitlines()
               if line.startswith("ensure_system_packages") for name in line.split()[1:]}
    ensured.add("redis-server")  # always, by ensure_system_packages itself
    for command in COMMANDS:
        owner = subprocess.run(["dpkg", "-S", f"*bin/{command}"], capture_output=True,
                               text=True, timeout=30)
        assert owner.returncode == 0, f"{command}: {owner.stderr}"
        package = owner.stdout.split(":")[0]
        assert package in ensured, f"{command} comes from {package}, which nothing installs"
