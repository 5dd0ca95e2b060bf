"""The upgrade drill (issue 16): the release before the redesign of redelivery, installed for
real, upgraded to this one through ``platform/upgrade`` with documents in flight and the
dependency set changed (no lock, then the hashed lock), then rolled back through
``platform/rollback``, documents in flight again: 0 lost, 0 done twice, each way.

The old release's messages (no generation header) run on the new workers, and the new
release's (with headers) on the old ones after the rollback; the old workers renew kombu leases
the new ones no longer need. The units are started and restarted as systemd would
(tests/platform/test_install.py's Box), Redis kept running throughout.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import urllib3

from apps.ops.envfile import parse_env_file
from tests.platform.test_install import Box, _ok, https_login, submit
from tests.procs import ROOT, free_port, wait_until

pytestmark = pytest.mark.processes
# The last commit before issue 16 (main when it was opened): kombu lease renewal, the broker
# scan, the beat's private kombu push, requirements.txt without a lock.
BEFORE = "b8c62bee483bcc6ff21e886ca963c2f3d455bab4"
USER = "platform-drill"
# Documents long enough to be running on a worker that a restart stops (warm shutdown).
LONG = "#!canary:work-seconds=6\n"


def tree_at(commit: str, directory: Path) -> Path:
    """This repository's tree at ``commit``, as a release source directory."""
    found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
                           capture_output=True, timeout=30)
    assert found.returncode == 0, (
        f"commit {commit} is not in this clone's history: the drill needs a full clone")
    directory.mkdir(mode=0o755)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True,
                             capture_output=True, timeout=120).stdout
    subprocess.run(["tar", "-C", str(directory), "-xf", "-"], input=archive, check=True,
                   timeout=120)
    return directory


def states(root: Path) -> tuple[dict[int, str], dict[int, int]]:
    import sqlite3

    with sqlite3.connect(root / "var/lib/platform/db.sqlite3") as db:
        state = dict(db.execute("SELECT id, state FROM documents_document"))
        done = dict(db.execute("SELECT document_id, count(*) FROM documents_documentrun "
                               "WHERE outcome = 'done' GROUP BY document_id"))
    return state, done


def drill_step(running: Box, client, base: str, label: str, units: tuple[str, ...],  # type: ignore[no-untyped-def]
               root: Path) -> tuple[list[int], float]:
    """Documents submitted before and during the restarts of ``units``: all done once."""
    submitted = [submit(client, base, f"{LONG}{label} before {i}") for i in range(4)]
    started = time.monotonic()
    for unit in units:
        if unit != "platform-web":
            submitted.append(submit(client, base, f"{LONG}{label} during {unit}"))
        running.restart(unit)
    wait_until(lambda: _ok(base + "/readyz", running), timeout=180, what=f"{label}: ready")
    submitted.append(submit(client, base, f"{label} after"))
    restarts_s = time.monotonic() - started

    def finished() -> bool:
        state, _ = states(root)
        return all(state.get(i) in ("done", "failed") for i in submitted)

    wait_until(finished, timeout=180, interval=0.5, what=f"{label}: every document finished")
    return submitted, restarts_s


def test_upgrade_from_the_release_before_and_back_loses_and_doubles_nothing(tmp_path, measure):
    root = Path(tempfile.mkdtemp(prefix="platform-drill-"))
    root.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    env.update({"PLATFORM_USER": USER, "WEB_HOST": "127.0.0.1", "WEB_PORT": str(free_port()),
                "REDIS_PORT": str(free_port()), "FLOWER_PORT": str(free_port())})
    old = tree_at(BEFORE, tmp_path / "src-before")
    installed = subprocess.run(["bash", str(old / "platform/install"), "--prefix", str(root),
                                "--hostname", "box.example"], env=env, capture_output=True,
                               text=True, timeout=600)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    app = root / "opt/platform"
    release_before = (app / "current").resolve()
    env_file = root / "etc/platform/platform.env"
    values = parse_env_file(env_file.read_text())
    manage = str(root / "usr/local/bin/platform-manage")
    subprocess.run([manage, "createsuperuser", "--noinput", "--username", "op",
                    "--email", "op@example.com"], check=True, timeout=120,
                   env={"PATH": "/usr/sbin:/usr/bin:/bin",
                        "DJANGO_SUPERUSER_PASSWORD": "op-pass-1234"})
    running = Box(root, tmp_path)
    base = f"https://127.0.0.1:{values['WEB_PORT']}"
    urllib3.disable_warnings()
    try:
        for unit in ("platform-redis", "platform-worker@1", "platform-worker@2",
                     "platform-beat@1", "platform-beat@2", "platform-web"):
            running.start(unit)
        wait_until(lambda: _ok(base + "/readyz", running), timeout=180,
                   what="the release before is ready")
        client = https_login(base, "op", "op-pass-1234")
        in_flight = [submit(client, base, f"{LONG}in flight at the upgrade {i}")
                     for i in range(4)]

        upgraded = subprocess.run(["bash", "platform/upgrade", "--prefix", str(root)],
                                  cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=600)
        assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
        release_after = (app / "current").resolve()
        assert release_after != release_before
        assert (release_after / "requirements-runtime.lock").exists()
        assert not (release_before / "requirements-runtime.lock").exists()
        up, up_s = drill_step(running, client, base, "upgrade", Box.ORDER, root)
        up = in_flight + up

        in_flight = [submit(client, base, f"{LONG}in flight at the rollback {i}")
                     for i in range(4)]
        rolled = subprocess.run(["bash", "platform/rollback", "--prefix", str(root)],
                                cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        assert (app / "current").resolve() == release_before
        down, down_s = drill_step(running, client, base, "rollback", Box.ORDER, root)
        # Every unit runs the release before now: its schema back, documents still flowing.
        late = [submit(client, base, f"{LONG}in flight at the schema step {i}") for i in range(2)]
        finished = subprocess.run(["bash", "platform/rollback", "--finish", "--prefix",
                                   str(root)], cwd=ROOT, env=env, capture_output=True,
                                  text=True, timeout=600)
        assert finished.returncode == 0, finished.stdout + finished.stderr
        late.append(submit(client, base, "after the schema step"))
        wait_until(lambda: all(states(root)[0].get(i) in ("done", "failed") for i in late),
                   timeout=180, interval=0.5, what="the schema step's documents finished")
        down = in_flight + down + late

        state, done = states(root)
        for label, ids in (("upgrade", up), ("rollback", down)):
            lost = [i for i in ids if state.get(i) != "done"]
            doubled = [i for i in ids if done.get(i, 0) != 1]
            assert lost == [] and doubled == [], (label, lost, doubled)
        measure(upgrade_submitted=len(up), rollback_submitted=len(down), lost=0,
                done_twice=0, upgrade_restarts_s=round(up_s, 1),
                rollback_restarts_s=round(down_s, 1))
    finally:
        running.stop_all()
        subprocess.Popen(["rm", "-rf", str(root)], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
