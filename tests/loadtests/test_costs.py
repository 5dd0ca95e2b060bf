"""The ceiling benchmark's meters: the SQLite writer probe and CPU of a process tree."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from loadtests.costs import WriterProbe, tree_cpu, writer_delta
from tests.procs import wait_until


def test_writer_probe_sees_the_lock_held_and_free(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("CREATE TABLE t (x)")
    probe = WriterProbe(path)
    probe.start()
    try:
        free_from = probe.counters()
        wait_until(lambda: probe.counters()["samples"] >= free_from["samples"] + 20,
                   timeout=10, what="20 samples with the lock free")
        writer.execute("BEGIN IMMEDIATE")  # held, as a Django transaction holds it
        held_from = probe.counters()
        wait_until(lambda: probe.counters()["samples"] >= held_from["samples"] + 20,
                   timeout=10, what="20 samples with the lock held")
        held_to = probe.counters()
        writer.execute("COMMIT")
    finally:
        probe.stop()
    assert writer_delta(free_from, held_from, 1.0)["writer_busy_fraction"] == 0
    assert writer_delta(held_from, held_to, 2.0) == {"writer_busy_fraction": 1.0,
                                                     "writer_busy_s": 2.0}


def test_tree_cpu_counts_a_child_that_has_exited() -> None:
    # The parent runs a child that burns CPU and exits, then waits: the child's CPU reaches
    # the parent's "children" times, as PostgreSQL's backends reach the postmaster's.
    burn = "import time\nt=time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess,sys; subprocess.run([sys.executable, '-c', "
                               f"{burn!r}]); print('done', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "done"
        assert tree_cpu([parent.pid]) >= 0.3
    finally:
        parent.kill()
        parent.wait()


def test_the_benchmarks_start_the_web_as_every_shipped_unit_does() -> None:
    # The figures are for the parser customers run (h11, ADR 20), not uvicorn's default.
    from loadtests.ceiling import WEB_ARGS
    from tests.procs import ROOT

    shipped = " ".join(WEB_ARGS)
    for unit in ("platform/supervisord.conf", "platform/systemd/platform-web.service"):
        assert shipped in (ROOT / unit).read_text(), unit
