"""A real PostgreSQL server for tests, started through platform/postgres (the one recipe).

``PostgresServer`` is one cluster: the OS package's binaries, its own data directory, a free
port on the address it is given, a scram-sha-256 password, run as an unprivileged user. The
data directory lives under /tmp, not under pytest's tmp dirs: those are 0700 and owned by the
test user, and the server runs as ``postgres`` when the tests run as root.

``PgConnection`` lets tests write SQL once for both engines: ``?`` placeholders, and rows read
by name and by position, as with ``sqlite3.Row``.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql
from psycopg.adapt import Loader
from psycopg.rows import RowMaker

from tests.procs import ROOT, Proc, migrate_and_create_login, spawn, wait_until

SCRIPT = ROOT / "platform" / "postgres"
# The cluster's superuser (creates databases) and the application's role (owns them, no
# superuser: platform/postgres).
ADMIN = "platform_admin"
APP_USER = "platform"


def free_port_on(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so from the last ")".
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


class PostgresServer:
    """One PostgreSQL cluster on ``host`` and a free port; killable, restartable."""

    def __init__(self, log_dir: Path, *, host: str = "127.0.0.1", port: int | None = None,
                 password: str | None = None, netns: str | None = None) -> None:
        self.host = host
        self.netns = netns  # the network namespace it runs in (tests/netns.py)
        self.port = port or free_port_on(host)
        self.user = APP_USER
        self.password = password or secrets.token_urlsafe(16)
        self.admin_user = ADMIN
        self.admin_password = secrets.token_urlsafe(16)
        self.log_dir = log_dir
        # Reachable by the server's user: a private parent the server may only traverse.
        self.root = Path(tempfile.mkdtemp(prefix="platform-pg-"))
        self.root.chmod(0o711)
        self.dir = self.root / "cluster"
        self.proc: Proc | None = None
        self.starts = 0
        self._script("init", str(self.dir), POSTGRES_PASSWORD=self.password,
                     POSTGRES_ADMIN_PASSWORD=self.admin_password)

    def _script(self, *args: str, **env: str) -> None:
        result = subprocess.run([str(SCRIPT), *args], env={**os.environ, **env},
                                capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"platform/postgres {args[0]} failed:\n{result.stderr[-3000:]}")

    def url(self, dbname: str = "postgres") -> str:
        """The application's URL (its own role, not the superuser)."""
        return (f"postgres://{self.user}:{quote(self.password, safe='')}@{self.host}:"
                f"{self.port}/{dbname}")

    def connect(self, dbname: str = "postgres", *, admin: bool = True,
                **kwargs: Any) -> psycopg.Connection[Any]:
        """A connection as the superuser (tests set up and inspect), or as the application's
        role with ``admin=False``."""
        user, password = ((self.admin_user, self.admin_password) if admin
                          else (self.user, self.password))
        return psycopg.connect(host=self.host, port=self.port, user=user,
                               password=password, dbname=dbname, connect_timeout=5,
                               **kwargs)

    def start(self) -> PostgresServer:
        self.starts += 1
        self.proc = spawn(f"postgres-{self.host}-{self.starts}",
                          [str(SCRIPT), "run", str(self.dir), self.host, str(self.port)],
                          env=dict(os.environ), log_dir=self.log_dir, netns=self.netns)

        def answers() -> bool:
            if not self.proc or not self.proc.alive():
                raise AssertionError(f"postgres exited:\n{self.proc and self.proc.log()[-3000:]}")
            with self.connect(autocommit=True) as conn:
                return conn.execute("SELECT 1").fetchone() == (1,)

        wait_until(answers, timeout=60, what="postgres answers")
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the postmaster and every process it started, as a crash would.

        Not its process group alone: each backend calls setsid() as it starts (PostgreSQL's
        InitPostmasterChild), so a group signal reaches the postmaster only, and the
        backends, orphaned, go on serving their connections until they notice, committing
        what they are given (measured: two 202s after a group SIGKILL). The postmaster is
        stopped first, so that it starts no backend between the listing and the kill."""
        assert self.proc is not None
        postmaster = self.proc.popen.pid
        self.proc.signal(signal.SIGSTOP, group=True)
        for pid in [postmaster, *children(postmaster)]:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if sig != signal.SIGKILL:
            self.proc.signal(signal.SIGCONT, group=True)
        self.proc.wait_exit(timeout=60)

    def restart(self) -> PostgresServer:
        if self.proc is not None and self.proc.alive():
            self.shutdown()
        return self.start()

    def shutdown(self) -> None:
        """Fast shutdown (SIGINT): clients disconnected, everything committed kept."""
        if self.proc is not None and self.proc.alive():
            self.proc.signal(signal.SIGINT)
            try:
                self.proc.wait_exit(timeout=60)
            except subprocess.TimeoutExpired:
                pass
            self.proc.stop()

    def stop(self) -> None:
        """Shut down and remove the data directory."""
        self.shutdown()
        shutil.rmtree(self.root, ignore_errors=True)

    # --- databases -----------------------------------------------------------------------
    def create_database(self, name: str, *, template: str | None = None) -> str:
        """Create ``name`` (a copy of ``template`` when given), owned by the application's
        role as platform/postgres creates it, and return its URL."""
        ident, owner = sql.Identifier(name), sql.Identifier(self.user)
        query = sql.SQL("CREATE DATABASE {} OWNER {}").format(ident, owner)
        if template:
            query = sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE {}").format(
                ident, owner, sql.Identifier(template))
        with self.connect(autocommit=True) as conn:
            conn.execute(query)
        return self.url(name)

    def drop_database(self, name: str) -> None:
        with self.connect(autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))

    @contextmanager
    def db(self, dbname: str) -> Iterator[PgConnection]:
        conn = self.connect(dbname, row_factory=_row_factory, options="-c TimeZone=UTC",
                            application_name="tests")
        # Timestamps as the text Django keeps in SQLite (UTC, no offset, microseconds), so a
        # test reads them the same way on both engines.
        conn.adapters.register_loader("timestamptz", SqliteStyleTimestamp)
        conn.adapters.register_loader("timestamp", SqliteStyleTimestamp)
        try:
            yield PgConnection(conn)
        finally:
            conn.close()


class SqliteStyleTimestamp(Loader):
    """``2026-01-02 03:04:05.678+00`` (the session is in UTC) -> ``2026-01-02 03:04:05.678000``."""

    def load(self, data: Any) -> str:
        text = bytes(data).decode().removesuffix("+00")
        if "." in text:
            whole, fraction = text.split(".")
            text = f"{whole}.{fraction:0<6}"
        return text


class Row(tuple):  # type: ignore[type-arg]
    """A result row readable by position and by column name, like ``sqlite3.Row``."""

    _names: dict[str, int]

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self._names[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


def _row_factory(cursor: psycopg.Cursor[Any]) -> RowMaker[Row]:
    names = {d.name: i for i, d in enumerate(cursor.description or ())}
    cls = type("Row", (Row,), {"_names": names})
    return cls  # a tuple subclass: called with the row's values


# Turn sqlite3's qmark style into psycopg's format style: a literal % doubles first.
_QMARK = re.compile(r"\?")


def to_format_style(sql: str) -> str:
    return _QMARK.sub("%s", sql.replace("%", "%%"))


class PgConnection:
    """The slice of sqlite3.Connection the tests use, on psycopg: ``?`` placeholders."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        return self.conn.execute(to_format_style(sql), tuple(params))

    def executemany(self, sql: str, seq: Sequence[Sequence[Any]]) -> psycopg.Cursor[Any]:
        cursor = self.conn.cursor()
        cursor.executemany(to_format_style(sql), [tuple(p) for p in seq])
        return cursor

    def commit(self) -> None:
        self.conn.commit()

    def rollback(self) -> None:
        self.conn.rollback()

    def close(self) -> None:
        self.conn.close()


class PostgresTemplate:
    """A migrated database with the test login; each Stack gets a fresh copy of it.

    ``CREATE DATABASE ... TEMPLATE`` copies files, not SQL: tens of milliseconds, against
    seconds for migrating each time.
    """

    name = "platform_template"

    def __init__(self, server: PostgresServer, base_dir: Path) -> None:
        self.server = server
        self.copies = 0
        url = server.create_database(self.name)
        migrate_and_create_login(base_dir, database_url=url)

    def new_database(self) -> tuple[str, str]:
        """A fresh copy: (name, URL)."""
        self.copies += 1
        name = f"stack_{os.getpid()}_{self.copies}"
        return name, self.server.create_database(name, template=self.name)


def make_template_pg(base_dir: Path) -> PostgresTemplate:
    """Start this test process's server and migrate its template database once."""
    base_dir.mkdir(parents=True, exist_ok=True)
    server = PostgresServer(base_dir / "log").start()
    try:
        return PostgresTemplate(server, base_dir)
    except BaseException:
        server.stop()
        raise
