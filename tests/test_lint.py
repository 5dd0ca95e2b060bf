"""The code stays linted: ruff with the project's configuration (pyproject.toml)."""

from __future__ import annotations

import subprocess

from tests.procs import BIN, ROOT


def test_ruff_finds_nothing():
    result = subprocess.run([str(BIN / "ruff"), "check", "."], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
