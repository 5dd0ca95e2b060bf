"""Consistent backups of the box's two stores, a bounded number kept, and their restore.

The database is copied with SQLite's online backup API (a consistent snapshot while other
processes write) or ``pg_dump``; Redis with its append-only files (everything Redis
acknowledged before the copy began; a command cut off at the end is dropped on load by
``aof-load-truncated``), or, on a host without the data role, a snapshot fetched over the
network and stored in the same layout. The elected beat schedules ``ops.backup``
(scheduler/tables.py); each backup's directory is named by its slot, so a slot delivered
twice is backed up once.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connections

from celery_conf.connections import redis_client

BACKUP_PREFIX = "backup-"
AOF_DIR_NAME = "appendonlydir"  # Redis 7's multi-part AOF directory (appenddirname)
SQLITE_FILE = "db.sqlite3"
PG_DUMP_FILE = "db.pgdump"
MANIFEST = "manifest.json"
# libpq's TLS connection options (dj-database-url puts them in OPTIONS) and the environment
# variables pg_dump and pg_restore read them from.
LIBPQ_TLS_ENV = (("sslmode", "PGSSLMODE"), ("sslrootcert", "PGSSLROOTCERT"),
                 ("sslcert", "PGSSLCERT"), ("sslkey", "PGSSLKEY"), ("sslcrl", "PGSSLCRL"))
# A rewrite can replace the AOF files while they are copied; copy again a few times.
AOF_COPY_ATTEMPTS = 3


class BackupError(Exception):
    pass


def backup_create(*, slot: str | None = None, root: Path | None = None,
                  keep: int | None = None) -> Path | None:
    """Take a backup into ``root``/backup-<slot>; None when that slot's backup exists already."""
    root = root or settings.BACKUP_DIR
    keep = settings.BACKUP_KEEP if keep is None else keep
    stamp = (datetime.fromisoformat(slot) if slot else datetime.now(UTC)).strftime(
        "%Y%m%dT%H%M%SZ")
    final = root / f"{BACKUP_PREFIX}{stamp}"
    if final.exists():
        return None
    partial = root / f".partial-{stamp}-{time.monotonic_ns()}"
    partial.mkdir(parents=True)
    try:
        database = _database_backup(partial)
        if "data" in settings.PLATFORM_ROLES:
            redis_files = _aof_copy(settings.REDIS_DATA_DIR / AOF_DIR_NAME,
                                    partial / AOF_DIR_NAME)
        else:
            # Redis runs on another host (adr/0026): its files are not here to copy.
            redis_files = _redis_snapshot(partial / AOF_DIR_NAME)
        (partial / MANIFEST).write_text(json.dumps({
            "taken_at": datetime.now(UTC).isoformat(), "slot": slot,
            "database": database, "redis_files": redis_files,
        }, indent=2))
        # Make room first, so the directory never holds more than ``keep`` complete backups
        # (unless two backups run at once), then publish: complete or not at all.
        backups_prune(root=root, keep=keep - 1)
        partial.rename(final)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return final


def backups_list(*, root: Path | None = None) -> list[Path]:
    root = root or settings.BACKUP_DIR
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if p.name.startswith(BACKUP_PREFIX) and p.is_dir())


def backups_prune(*, root: Path, keep: int) -> list[Path]:
    existing = backups_list(root=root)
    removed = existing[:-keep] if keep > 0 else existing
    for path in removed:
        shutil.rmtree(path)
    return removed


def backup_restore(*, backup: Path, force: bool = False, redis: bool = True) -> dict[str, Any]:
    """Restore the database (and Redis's AOF) from ``backup`` into this box's data paths.

    Refuses to overwrite existing data unless ``force``; Redis must be stopped for its files.
    """
    manifest_path = backup / MANIFEST
    if not manifest_path.exists():
        raise BackupError(f"{backup} is not a complete backup (no {MANIFEST})")
    manifest = json.loads(manifest_path.read_text())
    restored: dict[str, Any] = {"backup": str(backup), "taken_at": manifest["taken_at"]}
    restored["database"] = _database_restore(backup, force=force)
    if redis:
        target = settings.REDIS_DATA_DIR / AOF_DIR_NAME
        if target.exists() and any(target.iterdir()):
            if not force:
                raise BackupError(f"{target} holds Redis data; stop Redis and pass --force "
                                  "to replace it")
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(backup / AOF_DIR_NAME, target)
        restored["redis"] = str(target)
    return restored


def _database_backup(directory: Path) -> dict[str, Any]:
    conf = settings.DATABASES["default"]
    if conf["ENGINE"] == "django.db.backends.sqlite3":
        target = directory / SQLITE_FILE
        source = sqlite3.connect(str(conf["NAME"]), timeout=conf["OPTIONS"].get("timeout", 20))
        dest = sqlite3.connect(str(target))
        try:
            source.backup(dest)  # SQLite's online backup: one consistent snapshot
        finally:
            dest.close()
            source.close()
        return {"engine": "sqlite", "file": SQLITE_FILE, "bytes": target.stat().st_size}
    if conf["ENGINE"] == "django.db.backends.postgresql":
        target = directory / PG_DUMP_FILE
        # Custom format: compressed, and pg_restore can --clean and restore in one transaction.
        _pg_run("pg_dump", "--format=custom", f"--file={target}", "--no-password",
                "--dbname", str(conf["NAME"]))
        return {"engine": "postgresql", "file": PG_DUMP_FILE, "bytes": target.stat().st_size,
                "server_version": _pg_major()}
    raise BackupError(f"no backup method for {conf['ENGINE']}")


def _database_restore(backup: Path, *, force: bool) -> dict[str, Any]:
    conf = settings.DATABASES["default"]
    if conf["ENGINE"] == "django.db.backends.sqlite3":
        target = Path(conf["NAME"])
        if target.exists() and target.stat().st_size > 0 and not force:
            raise BackupError(f"{target} exists; pass --force to replace it")
        connections.close_all()
        for suffix in ("-wal", "-shm"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        source = sqlite3.connect(str(backup / SQLITE_FILE))
        dest = sqlite3.connect(str(target))
        try:
            source.backup(dest)
        finally:
            dest.close()
            source.close()
        return {"engine": "sqlite", "file": str(target)}
    if conf["ENGINE"] == "django.db.backends.postgresql":
        connection = connections["default"]
        with connection.cursor():
            tables = connection.introspection.table_names()
        if tables and not force:
            raise BackupError(f"database {conf['NAME']!r} on {conf['HOST']} has "
                              f"{len(tables)} table(s); pass --force to replace them")
        connections.close_all()
        # All or nothing: a restore cut short leaves the database as it was.
        _pg_run("pg_restore", "--clean", "--if-exists", "--no-owner", "--no-password",
                "--single-transaction", "--exit-on-error", "--dbname", str(conf["NAME"]),
                str(backup / PG_DUMP_FILE))
        return {"engine": "postgresql", "database": str(conf["NAME"]), "host": conf["HOST"]}
    raise BackupError(f"no restore method for {conf['ENGINE']}")


def _aof_copy(source: Path, target: Path) -> list[str]:
    if not source.exists():
        raise BackupError(f"no Redis append-only files at {source} (REDIS_DATA_DIR)")
    for attempt in range(AOF_COPY_ATTEMPTS):
        try:
            shutil.copytree(source, target)
            return sorted(p.name for p in target.iterdir())
        except (FileNotFoundError, shutil.Error):
            shutil.rmtree(target, ignore_errors=True)
            if attempt == AOF_COPY_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _redis_snapshot(target: Path) -> list[str]:
    """Redis's data fetched over the network, as a replica would (``redis-cli --rdb``: a
    snapshot Redis forks at the request, so everything acknowledged before it), stored as a
    multi-part AOF directory whose base is that RDB: Redis 7 loads it like the AOF copy, so
    ``backup_restore`` restores either kind the same way."""
    redis = settings.REDIS
    pool = redis_client().connection_pool
    if hasattr(pool, "get_master_address"):  # Sentinel: the current primary
        host, port = pool.get_master_address()
    else:
        host, port = pool.connection_kwargs["host"], pool.connection_kwargs["port"]
    target.mkdir(parents=True)
    base = "appendonly.aof.1.base.rdb"
    command = ["redis-cli", "-h", str(host), "-p", str(port)]
    if redis.uses_tls:
        command += ["--tls"] + (["--cacert", redis.ca_file] if redis.ca_file else [])
    # The password through the environment, never on a command line others can read.
    result = subprocess.run([*command, "--rdb", str(target / base)], capture_output=True,
                            text=True, timeout=3600,
                            env={"REDISCLI_AUTH": redis.data_password, "PATH": "/usr/bin:/bin"})
    if result.returncode != 0 or not (target / base).exists():
        raise BackupError(f"redis-cli --rdb from {host}:{port} failed: {result.stderr[-500:]}")
    (target / "appendonly.aof.manifest").write_text(f"file {base} seq 1 type b\n")
    return sorted(p.name for p in target.iterdir())


def _pg_major() -> int:
    connection = connections["default"]
    connection.ensure_connection()
    return int(connection.pg_version) // 10000


def _pg_run(program: str, *args: str) -> None:
    """Run a PostgreSQL client of the server's major version (pg_dump refuses a newer
    server, and a newer pg_dump's archive an older pg_restore), with the host, port, user and
    password of DATABASE_URL in its environment: never on its command line, which any local
    user can read in ``ps``."""
    conf = settings.DATABASES["default"]
    major = _pg_major()
    binary = settings.POSTGRES_CLIENT_ROOT / str(major) / "bin" / program
    if not binary.exists():
        raise BackupError(f"{binary} is missing: the server is PostgreSQL {major}; install "
                          f"postgresql-client-{major}")
    env = {**os.environ, "PGHOST": str(conf["HOST"]), "PGPORT": str(conf["PORT"] or 5432),
           "PGUSER": str(conf["USER"]), "PGPASSWORD": str(conf["PASSWORD"]),
           "PGAPPNAME": "platform-backup"}
    # A database on another host is reached as the platform reaches it: with the URL's TLS
    # options (sslmode=verify-full, sslrootcert, ...), not libpq's unverified default.
    options = conf.get("OPTIONS", {})
    env.update({variable: str(options[option]) for option, variable in LIBPQ_TLS_ENV
                if option in options})
    result = subprocess.run([str(binary), *args], env=env, capture_output=True, text=True,
                            timeout=settings.BACKUP_DATABASE_TIMEOUT_S)
    if result.returncode != 0:
        raise BackupError(f"{program} failed ({result.returncode}): {result.stderr[-2000:]}")
