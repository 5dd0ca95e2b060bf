"""The test PostgreSQL server (platform/postgres via tests/pgserver.py) is what it claims:
an unprivileged server, passwords only, on exactly the address given, durable across a kill."""

from __future__ import annotations

import os
import pwd
import signal
from pathlib import Path

import psycopg
import pytest

from tests.database.test_up_postgres import app_role_is_confined
from tests.pgserver import PostgresServer


@pytest.fixture
def server(tmp_path: Path) -> PostgresServer:
    server = PostgresServer(tmp_path / "log").start()
    yield server
    server.stop()


def test_runs_unprivileged_with_passwords_only_on_the_given_address(
        server: PostgresServer) -> None:
    owner = pwd.getpwuid(os.stat(server.dir / "data").st_uid).pw_name
    assert owner == ("postgres" if os.getuid() == 0 else pwd.getpwuid(os.getuid()).pw_name)
    with server.connect(autocommit=True) as conn:
        settings = dict(conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('fsync', 'listen_addresses', 'password_encryption', 'synchronous_commit')"
        ).fetchall())
        hba = conn.execute("SELECT type, auth_method FROM pg_hba_file_rules").fetchall()
    assert settings == {"fsync": "on", "listen_addresses": server.host,
                        "password_encryption": "scram-sha-256", "synchronous_commit": "on"}
    assert hba and {method for _, method in hba} == {"scram-sha-256"}
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(host=server.host, port=server.port, user=server.user,
                        password="wrong", dbname="postgres", connect_timeout=5)
    # Nothing answers on another loopback address.
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(host="127.0.0.2", port=server.port, user=server.user,
                        password=server.password, dbname="postgres", connect_timeout=5)


def test_a_committed_row_survives_sigkill(server: PostgresServer) -> None:
    with server.connect(autocommit=True) as conn:
        conn.execute("CREATE TABLE t (n int)")
        conn.execute("INSERT INTO t VALUES (1)")
    server.kill(signal.SIGKILL)
    server.start()
    with server.connect() as conn:
        assert conn.execute("SELECT n FROM t").fetchall() == [(1,)]


def test_template_copies_are_independent_and_speak_qmark(server: PostgresServer) -> None:
    server.create_database("tpl")
    with server.db("tpl") as db:
        db.execute("CREATE TABLE t (n int, s text)")
        db.execute("INSERT INTO t VALUES (?, ?)", (1, "100%"))
        db.commit()
    server.create_database("copy", template="tpl")
    with server.db("copy") as db:
        db.execute("UPDATE t SET n = ? WHERE s LIKE '%\\%'", (2,))
        db.commit()
        row = db.execute("SELECT n, s FROM t").fetchone()
    assert (row[0], row["s"], row.keys()) == (2, "100%", ["n", "s"])
    with server.db("tpl") as db:
        assert db.execute("SELECT n FROM t").fetchone()["n"] == 1


def test_the_application_role_is_no_superuser_and_owns_its_database(
        server: PostgresServer) -> None:
    url = server.create_database("app")
    assert app_role_is_confined(url)
    # The superuser (tests and platform/postgres only) could; the application cannot.
    with server.connect(autocommit=True) as conn:
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
                            ).fetchone() == (True,)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        with psycopg.connect(url, connect_timeout=5, autocommit=True) as conn:
            conn.execute("CREATE ROLE intruder SUPERUSER")
