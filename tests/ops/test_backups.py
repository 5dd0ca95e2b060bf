"""Backups are private and a restore verifies before it touches anything: each refused,
failed or SIGKILLed restore leaves the live database and Redis files byte for byte as they
were; a good one replaces them."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from tests.procs import ROOT, RedisServer, child_env, wait_until

pytestmark = pytest.mark.processes
MARKER = "written after the backup"


@pytest.fixture
def box(tmp_path: Path, template_db: Path) -> tuple[Path, dict[str, str], RedisServer]:
    """A data directory: the migrated database (padded, so a restore takes a while), Redis's
    append-only files from a real redis-server, stopped, and the environment of manage.py."""
    base = tmp_path / "box"
    base.mkdir()
    shutil.copyfile(template_db, base / "db.sqlite3")
    with sqlite3.connect(base / "db.sqlite3") as db:
        db.execute("CREATE TABLE pad (b BLOB)")
        db.executemany("INSERT INTO pad VALUES (randomblob(1000000))", [()] * 60)
    # Its files, in this directory: the single-node server under either topology.
    redis = RedisServer(base, topology="single").start()
    try:
        redis.client().set("platform:test:key", "before")
    finally:
        redis.stop()
    env = child_env(base, database=base / "db.sqlite3", redis_url=redis.url,
                    BACKUP_DIR=str(base / "backups"))
    return base, env, redis


def manage(env: dict[str, str], *args: str,
           umask: int = 0o022) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, umask=umask)


def live(base: Path) -> dict[str, str]:
    """The live data, byte for byte: the database (and any WAL holding data) and Redis's
    files. Not the -shm index, nor an empty WAL: SQLite removes both when the last connection
    closes, whenever that is (a refused restore's own read-only look, for one)."""
    files = [f for f in base.glob("db.sqlite3*")
             if not f.name.endswith("-shm") and not (f.name.endswith("-wal")
                                                     and f.stat().st_size == 0)]
    files += sorted((base / "redis/appendonlydir").iterdir())
    return {str(f.relative_to(base)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in files}


def write_after_backup(base: Path) -> None:
    # closing(): sqlite3's own context manager commits but leaves the connection open.
    with closing(sqlite3.connect(base / "db.sqlite3")) as db, db:
        db.execute("CREATE TABLE IF NOT EXISTS marker (t TEXT)")
        db.execute("INSERT INTO marker VALUES (?)", (MARKER,))
    with closing(sqlite3.connect(base / "db.sqlite3")) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_backups_are_private_whatever_the_umask(box, umask):
    base, env, _ = box
    result = manage(env, "backup_now", umask=umask)
    assert result.returncode == 0, result.stderr
    backup = Path(result.stdout.strip())
    paths = [backup.parent, backup, *backup.rglob("*")]
    modes = {str(p): stat.S_IMODE(p.stat().st_mode) for p in paths}
    assert all(mode == (0o700 if Path(p).is_dir() else 0o600) for p, mode in modes.items()), \
        modes


def damaged(backup: Path, tmp_path: Path, name: str) -> Path:
    copy = tmp_path / f"backup-{name}"
    shutil.copytree(backup, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    aof = sorted((copy / "appendonlydir").glob("*.aof"))[-1]
    if name == "no-database":
        (copy / "db.sqlite3").unlink()
    elif name == "no-redis":
        shutil.rmtree(copy / "appendonlydir")
    elif name == "altered-aof":
        aof.write_bytes(aof.read_bytes() + b"*1\r\n$8\r\nFLUSHALL\r\n")
    elif name == "altered-database":
        with open(copy / "db.sqlite3", "r+b") as file:
            file.seek(5000)
            file.write(b"\xff")
    elif name == "postgresql":
        manifest["database"]["engine"] = "postgresql"
    elif name == "newer-schema":
        manifest["schema"].append(["documents", "9999_from_a_newer_release"])
    elif name == "no-manifest":
        (copy / "manifest.json").unlink()
    elif name == "garbage-manifest":
        (copy / "manifest.json").write_text("{not json")
    elif name == "checksums-not-a-map":
        manifest["sha256"] = sorted(manifest["sha256"])
    elif name == "no-taken-at":
        del manifest["taken_at"]
    elif name == "older-database":  # its migrations older than the manifest says
        with sqlite3.connect(copy / "db.sqlite3") as db:
            db.execute("DELETE FROM django_migrations WHERE app = 'documents' AND id = "
                       "(SELECT max(id) FROM django_migrations WHERE app = 'documents')")
        db.close()
        manifest["sha256"]["db.sqlite3"] = hashlib.sha256(
            (copy / "db.sqlite3").read_bytes()).hexdigest()
    elif name == "name-outside":  # a name that leaves the backup, its checksum "right"
        manifest["redis_files"].append("../db.sqlite3")
        manifest["sha256"]["appendonlydir/../db.sqlite3"] = manifest["sha256"]["db.sqlite3"]
    if name in ("postgresql", "newer-schema", "checksums-not-a-map", "no-taken-at",
                "name-outside", "older-database"):
        (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


REFUSALS = {
    "no-database": "db.sqlite3 is missing",
    "no-redis": "is missing",
    "altered-aof": "does not match the checksum",
    "altered-database": "does not match the checksum",
    "postgresql": "is a postgresql backup and this box's database is sqlite",
    "newer-schema": "another schema than this release's",
    "no-manifest": "not a complete backup",
    "garbage-manifest": "not a manifest this release can read",
    "checksums-not-a-map": "not a manifest this release can read",
    "no-taken-at": "not a manifest this release can read",
    "name-outside": "not a manifest this release can read",
    # The manifest's schema is a claim; the database's own migrations table is the fact.
    "older-database": "another schema than this release's",
}


def test_a_restore_refused_or_killed_changes_nothing_and_a_good_one_replaces(box, tmp_path,
                                                                             measure):
    base, env, redis = box
    result = manage(env, "backup_now")
    assert result.returncode == 0, result.stderr
    backup = Path(result.stdout.strip())
    write_after_backup(base)
    before = live(base)

    # Each damaged backup is refused with --force too; the live data is untouched.
    for name, message in REFUSALS.items():
        refused = manage(env, "restore_backup", "--force", str(damaged(backup, tmp_path, name)))
        assert refused.returncode == 1 and message in refused.stderr, (name, refused.stderr)
        assert live(base) == before, name

    # SIGKILLed while it builds the new database beside the live one.
    restore = subprocess.Popen([sys.executable, "manage.py", "restore_backup", "--force",
                                str(backup)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    wait_until(lambda: any(base.glob(".restore-db.sqlite3-*")), timeout=120, interval=0.001,
               what="the restore building its copy")
    restore.send_signal(signal.SIGKILL)
    restore.wait(timeout=30)
    assert restore.returncode == -signal.SIGKILL
    assert live(base) == before
    with sqlite3.connect(base / "db.sqlite3") as db:
        assert db.execute("SELECT t FROM marker").fetchall() == [(MARKER,)]

    # Without --force existing data is never replaced; with it the backup's data returns.
    kept = manage(env, "restore_backup", str(backup))
    assert kept.returncode == 1 and "pass --force" in kept.stderr
    assert live(base) == before
    started = time.monotonic()
    good = manage(env, "restore_backup", "--force", str(backup))
    assert good.returncode == 0, good.stderr
    restore_s = time.monotonic() - started
    assert not list(base.glob(".restore-*")) and not list((base / "redis").glob(".restore-*"))
    with sqlite3.connect(base / "db.sqlite3") as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
    assert "marker" not in tables and "pad" in tables
    redis.start()  # loads the restored append-only files
    try:
        assert redis.client().get("platform:test:key") == "before"
    finally:
        redis.stop()
    measure(refusals=len(REFUSALS), live_changed_by_refusals=0, live_changed_by_kill=0,
            restore_60mb_s=round(restore_s, 2))


def test_a_restore_is_refused_while_redis_runs_and_changes_nothing(box):
    # A restore under a running Redis swapped its files and reported success; Redis kept its
    # own data in memory, and its next rewrite of the append-only file put that data back
    # over the restored files: exit 0, and nothing of the backup's Redis data remained.
    base, env, redis = box
    result = manage(env, "backup_now")
    assert result.returncode == 0, result.stderr
    backup = Path(result.stdout.strip())
    redis.start()
    try:
        redis.client().set("platform:test:key", "after")
        before = live(base)
        refused = manage(env, "restore_backup", "--force", str(backup))
        assert refused.returncode == 1, refused.stdout
        assert "Redis is running" in refused.stderr, refused.stderr
        assert live(base) == before
        assert redis.client().get("platform:test:key") == "after"
        # The database alone may still be restored (--no-redis): Redis's files are not read.
        database_only = manage(env, "restore_backup", "--force", "--no-redis", str(backup))
        assert database_only.returncode == 0, database_only.stderr
    finally:
        redis.stop()


def test_backups_at_once_each_publish_one_and_the_newest_keep_remain(box):
    # Four at once (an operator's backup_now beside the nightly one, say), BACKUP_KEEP=2:
    # they crashed with tracebacks (two in one second renamed onto each other, two prunes
    # removed the same directory) and left one backup where two were to be kept.
    base, env, _ = box
    env = {**env, "BACKUP_KEEP": "2"}
    for _ in range(2):
        assert manage(env, "backup_now").returncode == 0
    runs = [subprocess.Popen([sys.executable, "manage.py", "backup_now"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(4)]
    taken = []
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        taken.append(Path(out.strip()))
    assert len(set(taken)) == 4  # each its own backup, named by its own path
    kept = sorted((base / "backups").glob("backup-*"))
    assert kept == sorted(taken)[-2:]
    assert not list((base / "backups").glob(".partial-*"))


@pytest.mark.parametrize("keep", ["0", "-1"])
def test_a_keep_below_one_is_refused_at_start_up(keep):
    # "0 keeps them all" is a common reading; here it made every backup delete all the
    # others before it published itself: one backup left, whatever was there.
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
        timeout=60, env={"PATH": "/usr/bin:/bin", "BACKUP_KEEP": keep,
                         "DJANGO_SETTINGS_MODULE": "config.settings.development"})
    assert result.returncode != 0
    assert f"BACKUP_KEEP must be at least 1, got {keep}" in result.stderr
