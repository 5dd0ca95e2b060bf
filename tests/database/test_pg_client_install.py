"""`platform/install` gives a host whose DATABASE_URL is PostgreSQL the client of the server's
major version (backups run its pg_dump and pg_restore): learnt from the server itself, or
from POSTGRES_MAJOR when the server cannot be asked."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psycopg

from tests.pgserver import PostgresServer
from tests.procs import BIN, ROOT


def client_packages(database_url: str, **env: str) -> subprocess.CompletedProcess[str]:
    """ensure_postgres_client with the package installer replaced by a line naming what it
    would install (this machine is not a fresh one; the decision is what is tested)."""
    script = ('set -euo pipefail; . platform/lib.sh; . platform/release.sh; '
              'ensure_system_packages() { echo "packages: $*"; }; '
              f'ensure_postgres_client "{BIN / "python"}"')
    base = {k: v for k, v in os.environ.items() if not k.startswith(("POSTGRES_", "PYTEST_"))}
    return subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**base, "DATABASE_URL": database_url, **env})


def test_the_client_of_the_servers_major_version_is_installed(tmp_path: Path) -> None:
    server = PostgresServer(tmp_path / "log").start()
    try:
        url = server.create_database("platform")
        with psycopg.connect(url) as conn:
            major = conn.info.server_version // 10000
        asked = client_packages(url)
    finally:
        server.stop()
    assert asked.returncode == 0, asked.stderr
    assert f"packages: postgresql-client-{major}" in asked.stdout
    assert server.password not in asked.stdout + asked.stderr
    # The server down: POSTGRES_MAJOR decides; without it the install stops and says why.
    given = client_packages(url, POSTGRES_MAJOR=str(major))
    assert f"packages: postgresql-client-{major}" in given.stdout, given.stderr
    refused = client_packages(url)
    assert refused.returncode == 1 and "give POSTGRES_MAJOR" in refused.stderr
    assert server.password not in refused.stdout + refused.stderr
    assert "packages:" not in refused.stdout
    # SQLite: no client.
    sqlite = client_packages(f"sqlite:///{tmp_path / 'db.sqlite3'}")
    assert sqlite.returncode == 0 and "packages:" not in sqlite.stdout
