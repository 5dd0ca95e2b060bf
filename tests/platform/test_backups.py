"""The elected beat backs the box up on its schedule, keeps a bounded number, and a backup
restored into a fresh data directory holds every document and Redis's data."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from tests.procs import ROOT, RedisServer, child_env, wait_until

pytestmark = pytest.mark.processes


def test_scheduled_backups_are_bounded_and_restore_every_document(make_stack, tmp_path,
                                                                  measure):
    stack = make_stack(env={"BACKUP_EVERY_S": "2", "BACKUP_KEEP": "2"})
    backups = stack.base_dir / "backups"
    # Documents as the database holds them (their processing is not what is backed up here).
    stack.manage("shell", "--no-imports", "-c",
                 "from django.contrib.auth.models import User; "
                 "from apps.documents.models import Document; "
                 "owner = User.objects.get(username='tester'); "
                 "[Document.objects.create(owner=owner, title=f'title {i}', content='x', "
                 "size_bytes=1) for i in range(12)]")
    titles = {r[0] for r in stack.query("SELECT id FROM documents_document")}
    assert len(titles) == 12
    # One backup at a time, as nightly slots are: the bound is on complete backups in the
    # directory, which two overlapping backups could each fill to BACKUP_KEEP.
    stack.start_worker("w1", concurrency=1)
    stack.start_elected_beat("beat1")
    stack.start_elected_beat("beat2")

    seen: set[str] = set()

    def taken() -> int:
        seen.update(p.name for p in backups.glob("backup-*"))
        return len(seen)

    wait_until(lambda: taken() >= 4, timeout=60, what="four scheduled backups")
    for proc in stack.procs:
        if proc.name.startswith("beat"):
            proc.stop()
    wait_until(lambda: not list(backups.glob(".partial-*")), timeout=30,
               what="backups in progress finished")
    kept = sorted(p for p in backups.glob("backup-*"))
    assert len(kept) <= 2, [p.name for p in kept]  # bounded: the older ones were pruned
    newest = kept[-1]
    manifest = json.loads((newest / "manifest.json").read_text())
    assert manifest["database"]["engine"] == "sqlite" and manifest["redis_files"]

    # Restore into a fresh data directory, as on a replacement box.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    redis = RedisServer(fresh)
    env = child_env(fresh, database=fresh / "db.sqlite3", redis_url=redis.url)
    result = subprocess.run([sys.executable, "manage.py", "restore_backup", str(newest)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    again = subprocess.run([sys.executable, "manage.py", "restore_backup", str(newest)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode != 0 and "pass --force" in again.stderr  # never overwrites data

    with sqlite3.connect(fresh / "db.sqlite3") as db:
        restored = dict(db.execute("SELECT id, title FROM documents_document"))
    assert set(restored) == titles
    assert all(restored[i].startswith("title ") for i in titles)
    redis.start()  # loads the restored append-only files
    try:
        keys = redis.client().keys("platform:beat:*")
        assert any(k.endswith("schedule") for k in keys), keys
    finally:
        redis.stop()
    measure(backups_taken=len(seen), backups_kept=len(kept), documents=len(titles),
            documents_restored=len(restored))
