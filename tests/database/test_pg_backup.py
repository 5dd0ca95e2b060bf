"""A backup taken on PostgreSQL (pg_dump, custom format) restores every document into a fresh
server, as on a replacement box, with the password never on a command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.pgserver import PostgresServer
from tests.procs import child_env

pytestmark = pytest.mark.processes

DOCUMENTS = 12


def test_a_postgres_backup_restores_every_document_into_a_fresh_server(make_stack, tmp_path,
                                                                       measure):
    stack = make_stack(postgres=True)
    stack.manage("shell", "--no-imports", "-c",
                 "from django.contrib.auth.models import User; "
                 "from apps.documents.models import Document; "
                 "owner = User.objects.get(username='tester'); "
                 "[Document.objects.create(owner=owner, title=f'title {i}', content='x', "
                 f"size_bytes=1) for i in range({DOCUMENTS})]")
    titles = dict(stack.query("SELECT id, title FROM documents_document"))
    assert len(titles) == DOCUMENTS

    backup = Path(stack.manage("backup_now").stdout.strip())
    manifest = json.loads((backup / "manifest.json").read_text())
    assert manifest["database"]["engine"] == "postgresql"
    assert manifest["database"]["bytes"] > 0

    # A replacement box: another server, another password, an empty database.
    fresh = PostgresServer(tmp_path / "fresh-log").start()
    try:
        url = fresh.create_database("restored")
        env = child_env(tmp_path / "fresh", database=tmp_path / "unused.sqlite3",
                        redis_url=stack.redis.url, database_url=url)
        (tmp_path / "fresh").mkdir()
        restore = stack.manage("restore_backup", "--no-redis", str(backup), check=False, **env)
        assert restore.returncode == 0, restore.stderr
        with fresh.db("restored") as db:
            restored = dict(db.execute("SELECT id, title FROM documents_document").fetchall())
        assert restored == titles
        # Never over existing data without --force.
        again = stack.manage("restore_backup", "--no-redis", str(backup), check=False, **env)
        assert again.returncode != 0 and "pass --force" in again.stderr
        forced = stack.manage("restore_backup", "--no-redis", "--force", str(backup),
                              check=False, **env)
        assert forced.returncode == 0, forced.stderr
        with fresh.db("restored") as db:
            assert db.execute("SELECT count(*) FROM documents_document").fetchone()[0] == len(
                titles)
    finally:
        fresh.stop()
    measure(documents=len(titles), documents_restored=len(restored),
            dump_bytes=manifest["database"]["bytes"])
