"""Consistent backups of the box's two stores, a bounded number kept, and their restore.

The database is copied with SQLite's online backup API (a consistent snapshot while other
processes write) or ``pg_dump``; Redis with its append-only files (everything Redis
acknowledged before the copy began; a command cut off at the end is dropped on load by
``aof-load-truncated``), or, on a host without the data role, a snapshot fetched over the
network and stored in the same layout. The elected beat schedules ``ops.backup``
(scheduler/tables.py); each backup's directory is named by its slot, so a slot delivered
twice is backed up once.

A backup is private (directories 0700, files 0600, whatever the umask) and carries every
file's sha256, the database engine and the schema (the applied migrations). A restore checks
all of that before it touches anything, builds the new data beside the live data and switches
each store in one rename (adr/0038).
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.migrations.loader import MigrationLoader
from redis.exceptions import RedisError

from celery_conf.connections import redis_client

BACKUP_PREFIX = "backup-"
BACKUP_STAMP = "%Y%m%dT%H%M%SZ"
PUBLISH_LOCK = ".publish.lock"  # in BACKUP_DIR: one backup published (and pruned) at a time
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
# Backups hold password hashes and session keys: the platform's user only.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
# Where a restore builds the new data, beside the live data (same filesystem: one rename).
RESTORE_PREFIX = ".restore-"
SQLITE_ENGINE = "django.db.backends.sqlite3"
POSTGRES_ENGINE = "django.db.backends.postgresql"


def _engine_name(engine: str) -> str:
    return {SQLITE_ENGINE: "sqlite", POSTGRES_ENGINE: "postgresql"}.get(engine, engine)


class BackupError(Exception):
    pass


def backup_create(*, slot: str | None = None, root: Path | None = None,
                  keep: int | None = None) -> Path | None:
    """Take a backup into ``root``/backup-<slot>; None when that slot's backup exists already."""
    root = root or settings.BACKUP_DIR
    keep = settings.BACKUP_KEEP if keep is None else keep
    taken = datetime.fromisoformat(slot) if slot else datetime.now(UTC)
    final = root / f"{BACKUP_PREFIX}{taken.strftime(BACKUP_STAMP)}"
    if slot and final.exists():
        return None
    stamp = taken.strftime(BACKUP_STAMP)
    if not root.exists():
        root.mkdir(mode=PRIVATE_DIR_MODE, parents=True)
        root.chmod(PRIVATE_DIR_MODE)
    partial = root / f".partial-{stamp}-{time.monotonic_ns()}"
    # 0700 from the start (mkdir's mode only ever loses bits to the umask): nothing inside is
    # reachable by another user even before the files are made private below.
    partial.mkdir(mode=PRIVATE_DIR_MODE)
    partial.chmod(PRIVATE_DIR_MODE)
    try:
        database = _database_backup(partial)
        if "data" in settings.PLATFORM_ROLES:
            redis_files = _aof_copy(settings.REDIS_DATA_DIR / AOF_DIR_NAME,
                                    partial / AOF_DIR_NAME)
        else:
            # Redis runs on another host (adr/0026): its files are not here to copy.
            redis_files = _redis_snapshot(partial / AOF_DIR_NAME)
        checksums = {str(path.relative_to(partial)): _sha256(path)
                     for path in sorted(partial.rglob("*")) if path.is_file()}
        (partial / MANIFEST).write_text(json.dumps({
            "taken_at": datetime.now(UTC).isoformat(), "slot": slot,
            "database": database, "redis_files": redis_files, "sha256": checksums,
            "schema": _schema_applied(),
        }, indent=2))
        _make_private(partial)
        # One publisher at a time (backups at once: the nightly one beside a backup_now).
        with _publish_lock(root):
            if slot and final.exists():
                shutil.rmtree(partial)
                return None  # that slot's backup, published by another delivery meanwhile
            # By hand: named after every backup there (a second one within the same second,
            # or one that waited here), so the names keep their order and pruning removes
            # the oldest, never this one.
            newest = (backups_list(root=root) or [None])[-1] if not slot else None
            while newest is not None and final.name <= newest.name:
                taken += timedelta(seconds=1)
                final = root / f"{BACKUP_PREFIX}{taken.strftime(BACKUP_STAMP)}"
            # Make room first, so the directory never holds more than ``keep`` complete
            # backups, then publish: complete or not at all.
            backups_prune(root=root, keep=keep - 1)
            partial.rename(final)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return final


@contextmanager
def _publish_lock(root: Path) -> Iterator[None]:
    fd = os.open(root / PUBLISH_LOCK, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


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

    Everything is checked first (every part present, its sha256 as recorded, the engine and
    the schema this code has); existing data is replaced only with ``force`` (Redis stopped).
    Each store is built beside the live one and switched in one rename: a restore refused,
    failed or killed leaves the live data exactly as it was.
    """
    manifest = backup_verify(backup=backup, redis=redis)
    if redis:
        _redis_stopped_check()
    conf = settings.DATABASES["default"]
    aof_target = settings.REDIS_DATA_DIR / AOF_DIR_NAME
    if not force:
        if conf["ENGINE"] == SQLITE_ENGINE:
            target = Path(conf["NAME"])
            if target.exists() and target.stat().st_size > 0:
                raise BackupError(f"{target} exists; pass --force to replace it")
        else:
            connection = connections["default"]
            with connection.cursor():
                tables = connection.introspection.table_names()
            if tables:
                raise BackupError(f"database {conf['NAME']!r} on {conf['HOST']} has "
                                  f"{len(tables)} table(s); pass --force to replace them")
        if redis and aof_target.exists() and any(aof_target.iterdir()):
            raise BackupError(f"{aof_target} holds Redis data; stop Redis and pass --force "
                              "to replace it")
    restored: dict[str, Any] = {"backup": str(backup), "taken_at": manifest["taken_at"]}
    _stale_stages_remove(Path(conf["NAME"]).parent if conf["ENGINE"] == SQLITE_ENGINE
                         else None, aof_target.parent)
    staged_aof = _aof_stage(backup, aof_target, manifest) if redis else None
    try:
        restored["database"] = _database_restore(backup, manifest)
    except BaseException:
        if staged_aof is not None:
            shutil.rmtree(staged_aof, ignore_errors=True)
        raise
    if staged_aof is not None:
        _switch_dir(staged_aof, aof_target)
        restored["redis"] = str(aof_target)
    return restored


def backup_verify(*, backup: Path, redis: bool = True) -> dict[str, Any]:
    """The backup's manifest, once every check passes; BackupError naming the first failure."""
    manifest_path = backup / MANIFEST
    if not manifest_path.is_file():
        raise BackupError(f"{backup} is not a complete backup (no {MANIFEST})")
    try:
        manifest = json.loads(manifest_path.read_text())
        database = manifest["database"]
        checksums = manifest["sha256"]
        schema = manifest["schema"]
        engine, file_name = database["engine"], database["file"]
        redis_files = manifest.get("redis_files") or []
        if not (isinstance(manifest["taken_at"], str) and isinstance(checksums, dict)
                and isinstance(redis_files, list) and isinstance(schema, list)
                and all(isinstance(n, str) for n in [*checksums, *checksums.values()])
                and all(_plain_name(n) for n in [file_name, *redis_files])
                and all(isinstance(p, list) and len(p) == 2 for p in schema)):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise BackupError(f"{manifest_path} is not a manifest this release can read (made "
                          "before backups carried checksums, or damaged)") from None
    live = _engine_name(settings.DATABASES["default"]["ENGINE"])
    if engine != live:
        raise BackupError(f"{backup} is a {engine} backup and this box's database is {live}: "
                          "restore it on a box with the same engine (DATABASE_URL)")
    needed = [file_name]
    if redis:
        if not isinstance(manifest.get("redis_files"), list) or not manifest["redis_files"]:
            raise BackupError(f"{backup} holds no Redis files (restore with --no-redis)")
        needed += [f"{AOF_DIR_NAME}/{name}" for name in manifest["redis_files"]]
    for name in needed:
        path = backup / name
        if not path.is_file():
            raise BackupError(f"{backup} is incomplete: {name} is missing")
        if checksums.get(name) != _sha256(path):
            raise BackupError(f"{backup}: {name} does not match the checksum recorded when the "
                              "backup was taken (damaged or altered)")
    known = _schema_known()
    theirs = {tuple(pair) for pair in schema}
    if engine == "sqlite" and theirs == known:
        # The manifest's schema is what was recorded; the database's own migrations table is
        # what the restore would bring back (checksums do not cover an edited manifest).
        theirs = _sqlite_schema(backup / file_name)
    if theirs != known:
        newer, older = sorted(theirs - known), sorted(known - theirs)
        raise BackupError(
            f"{backup} was taken with another schema than this release's "
            f"({len(newer)} migration(s) this release lacks, {len(older)} it has that the "
            f"backup lacks, e.g. {(newer or older)[0][0]}.{(newer or older)[0][1]}): restore it "
            "with the release that took it")
    return manifest


def _sqlite_schema(path: Path) -> set[tuple[str, str]]:
    """The migrations a SQLite backup's database records as applied (opened read-only)."""
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
        try:
            rows = {(app, name) for app, name in
                    db.execute("SELECT app, name FROM django_migrations")}
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise BackupError(f"{path} is not a database this release can read ({exc})") from None
    # As MigrationLoader counts them: a squashed migration is applied when all it replaces is.
    for key, migration in MigrationLoader(None, ignore_no_migrations=True).replacements.items():
        if all(tuple(target) in rows for target in migration.replaces):
            rows.add(key)
    return rows


def _plain_name(name: object) -> bool:
    """A file name inside its directory: nothing a manifest names may lead out of it."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name \
        and "\0" not in name


def _redis_stopped_check() -> None:
    """Refuse while the platform's Redis answers: a running Redis keeps its own data in memory
    and its next rewrite of the append-only files puts that back over the restored ones."""
    try:
        redis_client().ping()
    except (RedisError, OSError):
        return  # not answering: stopped (or unreachable), its files are free to replace
    raise BackupError("Redis is running: stop the platform, Redis included, before a "
                      "restore (or restore the database alone with --no-redis)")


def _stale_stages_remove(*directories: Path | None) -> None:
    """What a restore killed half-way left beside the live data (never the live data)."""
    for directory in directories:
        if directory is None or not directory.is_dir():
            continue
        for path in directory.glob(f"{RESTORE_PREFIX}*"):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _make_private(directory: Path) -> None:
    directory.chmod(PRIVATE_DIR_MODE)
    for path in directory.rglob("*"):
        path.chmod(PRIVATE_DIR_MODE if path.is_dir() else PRIVATE_FILE_MODE)


def _schema_applied() -> list[list[str]]:
    """The migrations applied to the live database, as [app, name] pairs."""
    loader = MigrationLoader(connections["default"], ignore_no_migrations=True)
    return sorted([app, name] for app, name in loader.applied_migrations)


def _schema_known() -> set[tuple[str, str]]:
    """The migrations this release's code has (what its schema is once migrated)."""
    return set(MigrationLoader(None, ignore_no_migrations=True).disk_migrations)


def _aof_stage(backup: Path, target: Path, manifest: dict[str, Any]) -> Path:
    """The backup's AOF directory copied beside ``target`` and checked again there."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.parent / f"{RESTORE_PREFIX}{AOF_DIR_NAME}-{time.monotonic_ns()}"
    try:
        shutil.copytree(backup / AOF_DIR_NAME, staged)
        for name in manifest["redis_files"]:
            if _sha256(staged / name) != manifest["sha256"][f"{AOF_DIR_NAME}/{name}"]:
                raise BackupError(f"the copy of {name} differs from the backup (disk error?)")
        _fsync_tree(staged)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return staged


_RENAME_EXCHANGE = 2  # linux/fs.h


def _switch_dir(staged: Path, target: Path) -> None:
    """Put ``staged`` at ``target`` in one step: renameat2(RENAME_EXCHANGE) swaps the two
    directories atomically (glibc's documented wrapper), so at every instant ``target`` is
    either the old data or the new; the old one is removed afterwards."""
    if not target.exists():
        staged.rename(target)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd = -100
    if libc.renameat2(at_fdcwd, os.fsencode(staged), at_fdcwd, os.fsencode(target),
                      _RENAME_EXCHANGE) != 0:
        error = ctypes.get_errno()
        shutil.rmtree(staged, ignore_errors=True)
        raise BackupError(f"cannot switch {target}: {os.strerror(error)}")
    shutil.rmtree(staged, ignore_errors=True)  # now the old data


def _fsync_tree(directory: Path) -> None:
    for path in [*directory.rglob("*"), directory]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


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


def _database_restore(backup: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    conf = settings.DATABASES["default"]
    if conf["ENGINE"] == "django.db.backends.sqlite3":
        target = Path(conf["NAME"])
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.parent / f"{RESTORE_PREFIX}{target.name}-{time.monotonic_ns()}"
        try:
            shutil.copyfile(backup / SQLITE_FILE, staged)
            if _sha256(staged) != manifest["sha256"][SQLITE_FILE]:
                raise BackupError("the copy of the database differs from the backup (disk error?)")
            _fsync_tree(staged)
            connections.close_all()
            if target.exists():
                # The live WAL's committed pages into the database file, and the WAL emptied:
                # the same data, and no WAL left that SQLite could replay onto the new file.
                live = sqlite3.connect(str(target), timeout=conf["OPTIONS"].get("timeout", 20))
                try:
                    live.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                finally:
                    live.close()
            staged.rename(target)
        except BaseException:
            staged.unlink(missing_ok=True)
            raise
        for suffix in ("-wal", "-shm"):  # empty after the checkpoint; the old file's
            Path(f"{target}{suffix}").unlink(missing_ok=True)
        return {"engine": "sqlite", "file": str(target)}
    if conf["ENGINE"] == "django.db.backends.postgresql":
        connections.close_all()
        # All or nothing: one transaction, so a restore cut short (or killed) leaves the
        # database as it was.
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
