"""`PLATFORM_DATABASE=postgres bash platform/up`: the project's own PostgreSQL cluster
(platform/postgres) under the whole platform, every process type connected and named, and
Ctrl-C stops the server too."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import psutil
import psycopg
import pytest
import requests

from tests.platform.up_script import stop_leftovers
from tests.procs import BIN, ROOT, free_port, wait_until

pytestmark = pytest.mark.processes


def app_role_is_confined(url: str) -> bool:
    """True when ``url``'s role is no superuser, cannot create roles or databases, owns its
    database, and ``COPY ... PROGRAM`` is refused to it."""
    with psycopg.connect(url, connect_timeout=10, autocommit=True) as conn:
        row = conn.execute(
            "SELECT rolsuper, rolcreaterole, rolcreatedb, "
            "pg_get_userbyid(d.datdba) = current_user FROM pg_roles r, pg_database d "
            "WHERE r.rolname = current_user AND d.datname = current_database()").fetchone()
        assert row == (False, False, False, True), row
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("COPY (SELECT 1) TO PROGRAM 'true'")
    return True


def test_platform_up_on_postgres_runs_its_own_cluster_and_stops_it(tmp_path, measure):
    # The var directory where the server's user can reach it (pytest's tmp_path is 0700).
    var = Path(tempfile.mkdtemp(prefix="platform-up-pg-"))
    var.chmod(0o711)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    env.update({"PLATFORM_VAR_DIR": str(var), "VENV": str(BIN.parent),
                "PLATFORM_DATABASE": "postgres", "POSTGRES_PORT": str(port),
                "REDIS_PORT": str(free_port()), "WEB_PORT": str(free_port()),
                "FLOWER_PORT": str(free_port())})
    log_path = tmp_path / "up.log"
    with open(log_path, "w") as log:
        up = subprocess.Popen(["bash", "platform/up"], cwd=ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: "running; press Ctrl-C to stop" in log_path.read_text(),
                   timeout=180, what="platform/up reports the platform running")
        password = (var / "postgres.password").read_text().strip()
        assert oct((var / "postgres.password").stat().st_mode & 0o777) == "0o600"
        platform_env = (var / "platform.env").read_text()
        assert f"@127.0.0.1:{port}/platform" in platform_env
        assert platform_env.count("DATABASE_URL=") == 1, platform_env  # written once

        def kinds() -> set[str]:
            with psycopg.connect(host="127.0.0.1", port=port, user="platform",
                                 password=password, dbname="platform") as conn:
                return {r[0] for r in conn.execute(
                    "SELECT DISTINCT application_name FROM pg_stat_activity "
                    "WHERE datname = 'platform' AND pid <> pg_backend_pid()").fetchall()}

        # The application's role is no superuser: SQL it runs cannot reach this host's shell.
        assert oct((var / "postgres.admin-password").stat().st_mode & 0o777) == "0o600"
        assert app_role_is_confined(platform_env.split("DATABASE_URL=")[1].split()[0])
        # manage.py finds the database through var/platform.env, as a bare shell would.
        status = subprocess.run([str(BIN / "python"), "manage.py", "status"], cwd=ROOT,
                                env=env, capture_output=True, text=True, timeout=90)
        assert status.returncode == 0 and "alive: 2" in status.stdout, status.stderr
        # The web's pool keeps its connection after the login page; the workers' and the
        # status command's are gone once their work is.
        requests.get(f"http://127.0.0.1:{env['WEB_PORT']}/readyz", timeout=10)
        seen = wait_until(lambda: "platform-web" in (k := kinds()) and k, timeout=30,
                          what="the web's connection named")
        postmasters = [p for p in psutil.process_iter(["cmdline"])
                       if p.info["cmdline"] and "postgres" in p.info["cmdline"][0]
                       and str(var) in " ".join(p.info["cmdline"])]
        assert len(postmasters) == 1 and postmasters[0].username() == "postgres"

        os.killpg(up.pid, signal.SIGINT)
        assert up.wait(timeout=120) == 0
        assert "stopped" in log_path.read_text()
        wait_until(lambda: not postmasters[0].is_running(), timeout=30,
                   what="PostgreSQL stopped with the platform")
        measure(connection_names=sorted(seen))
    finally:
        stop_leftovers(up, var / "supervisord.pid")
        subprocess.run([str(ROOT / "platform/postgres"), "stop", str(var / "postgres")],
                       capture_output=True, timeout=60)
        shutil.rmtree(var, ignore_errors=True)


def test_a_cluster_made_with_the_application_as_superuser_is_refused(tmp_path):
    """A var/postgres from before ADR 28 (no admin password beside it) is not started: its
    application role is the bootstrap superuser, which PostgreSQL cannot demote."""
    (tmp_path / "postgres/data").mkdir(parents=True)
    (tmp_path / "postgres/data/PG_VERSION").write_text("15\n")
    (tmp_path / "postgres.password").write_text("old-password\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "POSTGRES_"))}
    env.update({"PLATFORM_VAR_DIR": str(tmp_path), "PLATFORM_DATABASE": "postgres",
                "PLATFORM_ROLES": "web,workers,beat,flower,data"})
    result = subprocess.run(["bash", "-c", ". platform/lib.sh; ensure_postgres"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "created with the application's role as its superuser" in result.stderr
    assert not (tmp_path / "postgres.admin-password").exists()
