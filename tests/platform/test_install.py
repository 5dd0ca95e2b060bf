"""`platform/install` into a temporary root, for real: the user, the release with its own venv,
the secrets file, the units (checked by systemd-analyze verify), a second run that changes
nothing, then every unit's command line started directly and the box answering over TLS."""

from __future__ import annotations

import grp
import hashlib
import os
import re
import signal
import sqlite3
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
import requests
import urllib3

from apps.ops.envfile import parse_env_file
from celery_conf.names import Queue
from tests.platform.live import NumberedPublisher, TLSSSEClient
from tests.platform.units import listen_socket, owner_of, unit_process, unit_settings
from tests.procs import ROOT, free_port, wait_until

pytestmark = pytest.mark.processes
USER = "platform-test"
# Values of every class the installer must carry as data (spaces, quotes, $, backticks, &, ;,
# #, \, non-ASCII), each with commands that would leave CANARY behind if anything ran them.
CANARY = Path(tempfile.gettempdir()) / f"platform-box-ran-a-value-{os.getpid()}"
RUN_ME = f"$(touch {CANARY})`touch {CANARY}`;touch {CANARY}&"
TOLD = {
    "DJANGO_SECRET_KEY": "k8#$^&*(-_=+)y@!z%v`q'\"\\; é€ " + RUN_ME,
    "REDIS_PASSWORD": "p@ss w:rd/#?&%41 'q' \"dq\" \\ ü " + RUN_ME,
    "REDIS_BIND": "127.0.0.1 ::1",
}


@pytest.fixture(scope="module")
def box():
    # A root every user can traverse (pytest's own temporary directories are root-only).
    root = Path(tempfile.mkdtemp(prefix="platform-box-"))
    root.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    env.update({"PLATFORM_USER": USER, "WEB_HOST": "127.0.0.1", "WEB_PORT": str(free_port()),
                "REDIS_PORT": str(free_port()), "FLOWER_PORT": str(free_port()), **TOLD})
    first = install(root, env)
    yield root, env, first
    # Thousands of files per release: removing them takes tens of seconds on a busy disk, so
    # it happens beside the next tests instead of holding this worker.
    subprocess.Popen(["rm", "-rf", str(root)], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def install(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["bash", "platform/install", "--prefix", str(root),
                             "--hostname", "box.example"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def snapshot(root: Path) -> dict[str, tuple[float, str]]:
    """Every installed file outside the data directory: mtime and content hash."""
    files = {}
    for top in ("opt", "etc", "usr"):
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                files[str(path)] = (path.stat().st_mtime, digest)
    return files


def test_install_lays_out_user_release_secrets_and_units(box, measure):
    root, env, first = box
    etc, data, app = root / "etc/platform", root / "var/lib/platform", root / "opt/platform"
    current = (app / "current").resolve()
    assert current.parent == app / "releases" and (current / ".complete").exists()
    assert (current / "venv/bin/celery").exists() and (current / "venv/bin/uvicorn").exists()

    # The secrets: root and the platform's user only; strong; production settings.
    env_file = etc / "platform.env"
    mode = stat.S_IMODE(env_file.stat().st_mode)
    assert mode == 0o640 and owner_of(env_file) == "root"
    assert grp.getgrgid(env_file.stat().st_gid).gr_name == USER
    values = parse_env_file(env_file.read_text())
    assert values["DJANGO_SETTINGS_MODULE"] == "config.settings.production"
    # What it was told, byte for byte; nothing in it ran.
    assert {k: values[k] for k in TOLD} == TOLD
    assert not CANARY.exists()
    assert stat.S_IMODE((etc / "tls/key.pem").stat().st_mode) == 0o640

    # The data belongs to the user; the code does not (a process cannot rewrite its release).
    assert owner_of(data) == USER and owner_of(data / "db.sqlite3") == USER
    assert owner_of(current) == "root" and not (current.stat().st_mode & stat.S_IWOTH)
    # Migrated, and no development login.
    with sqlite3.connect(data / "db.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM django_migrations").fetchone()[0] > 10
        assert db.execute("SELECT count(*) FROM auth_user").fetchone()[0] == 0

    # Started at boot: platform.target is wanted by multi-user.target.
    assert (root / "etc/systemd/system/multi-user.target.wants/platform.target").is_symlink()
    # It says where everything is and how to check health.
    for label in ("Release", "Data", "Secrets", "Health", "Status", "Logs"):
        assert re.search(rf"^  {label}\s", first.stdout, re.MULTILINE), label

    # Running it again changes nothing.
    before = snapshot(root)
    again = install(root, env)
    assert "already built" in again.stderr
    assert snapshot(root) == before
    assert parse_env_file(env_file.read_text()) == values
    assert not CANARY.exists()
    measure(installed_files=len(before), changed_by_second_install=0)


def test_units_verify_clean_and_match_the_queues(box):
    root, _, _ = box
    units = sorted((root / "etc/systemd/system").glob("platform*"))
    assert len(units) == 8
    result = subprocess.run(["systemd-analyze", "verify", *map(str, units)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stderr
    worker = unit_settings(root / "etc/systemd/system/platform-worker@.service")
    queues = re.search(r"-Q (\S+)", worker["ExecStart"][0]).group(1)
    assert set(queues.split(",")) == {str(q) for q in Queue}
    # Stops outlast the hard task time limit, so a stop never kills a running task.
    assert int(worker["TimeoutStopSec"][0]) > 360 and worker["KillMode"] == ["mixed"]
    for unit in units:
        settings = unit_settings(unit)
        if unit.suffix == ".service":
            assert settings["User"] == [USER] and settings["Restart"] == ["always"]
            assert "MemoryMax" in settings


def logs(directory: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                     for p in sorted(directory.glob("*.log")))


REVERSIBLE = '''from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("documents", "{latest}")]
    operations = [migrations.RunSQL("CREATE TABLE upgrade_probe (id integer)",
                                    reverse_sql="DROP TABLE upgrade_probe")]
'''
IRREVERSIBLE = '''from django.db import migrations


def forwards(apps, schema_editor):
    pass


class Migration(migrations.Migration):
    dependencies = [("documents", "{latest}")]
    operations = [migrations.RunPython(forwards)]
'''


def source_with_migration(directory: Path, migration: str) -> Path:
    """A copy of this checkout with one more documents migration: the next release."""
    directory.mkdir(mode=0o755)
    subprocess.run(f"tar -C {ROOT} --exclude=./.venv --exclude=./var --exclude=./.git "
                   f"--exclude=__pycache__ -cf - . | tar -C {directory} -xf -",
                   shell=True, check=True, timeout=120)
    migrations = directory / "apps/documents/migrations"
    latest = max(p.stem for p in migrations.glob("0*.py"))
    number = int(latest[:4]) + 1
    (migrations / f"{number:04d}_upgrade_probe.py").write_text(
        migration.replace("{latest}", latest))
    return directory


def tables(root: Path) -> set[str]:
    with sqlite3.connect(root / "var/lib/platform/db.sqlite3") as db:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


class Box:
    """The installed units' processes, started and restarted the way systemd would."""

    ORDER = ("platform-beat@2", "platform-beat@1", "platform-worker@1", "platform-worker@2",
             "platform-web")

    def __init__(self, root: Path, logs: Path) -> None:
        self.units = root / "etc/systemd/system"
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        # platform-web.socket: opened once and kept across web restarts, as systemd does.
        self.web_socket = listen_socket(self.units / "platform-web.socket")

    def start(self, unit: str) -> None:
        name, _, instance = unit.partition("@")
        path = self.units / (f"{name}@.service" if instance else f"{name}.service")
        self.procs[unit] = unit_process(
            path, instance=instance, log=self.logs / f"{unit}.log",
            listen=self.web_socket if unit == "platform-web" else None)

    def stop(self, unit: str, timeout: float = 400) -> None:
        # KillMode=mixed / the default: SIGTERM to the main process; SIGKILL after the timeout.
        proc = self.procs.pop(unit)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def restart(self, unit: str) -> None:
        self.stop(unit)
        self.start(unit)

    def stop_all(self) -> None:
        # Redis last: a worker whose broker is gone spends its shutdown reconnecting.
        for unit in sorted(self.procs, key=lambda u: u == "platform-redis"):
            self.stop(unit, timeout=30)
        self.web_socket.close()


def test_upgrade_refuses_irreversible_then_switches_with_no_lost_work_and_rolls_back(
        box, tmp_path, measure):
    root, env, first = box
    app = root / "opt/platform"
    env_file = root / "etc/platform/platform.env"
    values = parse_env_file(env_file.read_text())
    # Short documents so the test drains quickly; the same code path as 3 s ones.
    env_file.write_text(env_file.read_text() + "DOCUMENTS_PROCESSING_SECONDS=0.5\n")
    release_a = (app / "current").resolve()
    manage = str(root / "usr/local/bin/platform-manage")
    subprocess.run([manage, "createsuperuser", "--noinput", "--username", "op",
                    "--email", "op@example.com"], check=True, timeout=120,
                   env={"PATH": "/usr/sbin:/usr/bin:/bin",
                        "DJANGO_SUPERUSER_PASSWORD": "op-pass-1234"})
    running = Box(root, tmp_path)
    config_before = rendered_config(root)
    base = f"https://127.0.0.1:{values['WEB_PORT']}"
    urllib3.disable_warnings()
    try:
        for unit in ("platform-redis", "platform-worker@1", "platform-worker@2",
                     "platform-beat@1", "platform-beat@2", "platform-web", "platform-flower"):
            running.start(unit)
        wait_until(lambda: _ok(base + "/readyz", running), timeout=120, what="release A ready")
        installed_box_checks(root, first, base, values, running)
        client = https_login(base, "op", "op-pass-1234")
        submitted = [submit(client, base, f"before upgrade {i}") for i in range(8)]

        # A release with a migration that cannot be undone is refused; nothing changes.
        refused = subprocess.run(
            ["bash", str(source_with_migration(tmp_path / "src-irreversible", IRREVERSIBLE)
                         / "platform/upgrade"), "--prefix", str(root)],
            env=env, capture_output=True, text=True, timeout=300)
        assert refused.returncode != 0
        assert "refusing to upgrade" in refused.stdout + refused.stderr
        assert (app / "current").resolve() == release_a
        assert sorted(p.name for p in (app / "releases").iterdir()) == [release_a.name]

        upgraded = subprocess.run(
            ["bash", str(source_with_migration(tmp_path / "src-next", REVERSIBLE)
                         / "platform/upgrade"), "--prefix", str(root)],
            env=env, capture_output=True, text=True, timeout=300)
        assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
        release_b = (app / "current").resolve()
        assert release_b != release_a and (app / "previous").resolve() == release_a
        assert "upgrade_probe" in tables(root)

        # Restart in the printed order while documents keep arriving.
        for unit in Box.ORDER:
            assert unit in upgraded.stderr
        # A live page stays open through the switch-over while events keep being published.
        page = TLSSSEClient(base, "; ".join(f"{k}={v}" for k, v in client.cookies.items()),
                            name="upgrade", cafile=str(root / "etc/platform/tls/cert.pem"))
        page.start()
        wait_until(page.ready.is_set, timeout=30, what="live page connected")
        publisher = NumberedPublisher(values["REDIS_URL"], rate=5)
        started = time.monotonic()
        polling = Poller(base + "/healthz")
        for unit in Box.ORDER:
            submitted += [submit(client, base, f"during {unit}")] if unit != "platform-web" else []
            running.restart(unit)
        web_restart = polling.stop()
        wait_until(lambda: _ok(base + "/readyz", running), timeout=120, what="release B ready")
        switch_s = time.monotonic() - started
        live = live_page_across(page, publisher, running)
        submitted += [submit(client, base, "after upgrade")]
        for unit, proc in running.procs.items():
            if unit not in ("platform-redis", "platform-flower"):
                assert Path(psutil.Process(proc.pid).cwd()) == release_b, unit
        # The processes started after the upgrade see exactly what the installer was told.
        processes_see(running, TOLD)
        assert rendered_config(root) == config_before, "upgrade changed the configuration"

        def all_done() -> bool:
            with sqlite3.connect(root / "var/lib/platform/db.sqlite3") as db:
                states = dict(db.execute("SELECT id, state FROM documents_document"))
            return all(states.get(i) == "done" for i in submitted)

        wait_until(all_done, timeout=120, what="every document submitted done")
        with sqlite3.connect(root / "var/lib/platform/db.sqlite3") as db:
            done_runs = dict(db.execute(
                "SELECT document_id, count(*) FROM documents_documentrun "
                "WHERE outcome = 'done' GROUP BY document_id"))
        assert all(done_runs[i] == 1 for i in submitted)

        # Roll back: release A's code first, then its schema (the newer code, still serving
        # until its restart, cannot run on the older schema; the older runs on the newer).
        rolled = subprocess.run(["bash", "platform/rollback", "--prefix", str(root)], cwd=ROOT,
                                env=env, capture_output=True, text=True, timeout=300)
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        assert (app / "current").resolve() == release_a
        assert "upgrade_probe" in tables(root), "the schema went back before the code did"
        assert "platform/rollback --finish" in rolled.stderr
        for unit in Box.ORDER:
            running.restart(unit)
        wait_until(lambda: _ok(base + "/readyz", running), timeout=120,
                   what="release A ready again")
        finished = subprocess.run(["bash", "platform/rollback", "--finish", "--prefix", str(root)],
                                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert finished.returncode == 0, finished.stdout + finished.stderr
        assert "upgrade_probe" not in tables(root)
        # Once per upgrade: a second rollback changes nothing (it used to switch to B's code
        # on A's schema), nor does a second --finish.
        again = subprocess.run(["bash", "platform/rollback", "--prefix", str(root)], cwd=ROOT,
                               env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "already rolled back" in again.stderr
        assert (app / "current").resolve() == release_a and not (app / "previous").exists()
        again = subprocess.run(["bash", "platform/rollback", "--finish", "--prefix", str(root)],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0 and "nothing to do" in again.stderr, again.stderr
        assert "upgrade_probe" not in tables(root)
        assert rendered_config(root) == config_before, "rollback changed the configuration"
        assert not CANARY.exists()
        web = psutil.Process(running.procs["platform-web"].pid)
        assert Path(web.cwd()) == release_a
        assert len(submit_and_list(client, base)) >= len(submitted)
        measure(submitted=len(submitted), lost=0, done_twice=0,
                restart_sequence_s=round(switch_s, 1), polls_during_restarts=web_restart["ok"],
                polls_failed=web_restart["failed"], polls_refused=web_restart["refused"],
                slowest_poll_ms=web_restart["slowest_ms"], **live)
        # The socket unit's promise: the port never refuses a connection. (A connection a
        # stopping uvicorn worker accepted but had not read yet is closed unanswered: a real
        # race of uvicorn's shutdown, counted in "failed", measured in adr/0020.)
        assert web_restart["refused"] == 0, web_restart
        client.close()  # an open keep-alive connection holds uvicorn's graceful shutdown
    finally:
        running.stop_all()


def live_page_across(page: TLSSSEClient, publisher: NumberedPublisher,
                     running: Box) -> dict[str, float]:
    """Every event published across the switch-over reached the page once, in order; the page
    reconnected to the new release's web worker and was replayed what it missed meanwhile."""
    published = publisher.stop()
    wait_until(lambda: len(page.numbers()) >= published, timeout=60,
               what=f"{published} events on the live page")
    ended, readies = list(page.ended_at), [e.at for e in page.of_kind("ready")]
    page.stop()
    got = page.numbers()
    assert got == list(range(published)), (
        f"lost {sorted(set(range(published)) - set(got))}, "
        f"duplicated {sorted(n for n in set(got) if got.count(n) > 1)}")
    new_workers = {p.pid for p in psutil.Process(running.procs["platform-web"].pid).children()}
    assert len(page.workers) >= 2 and page.workers[-1] in new_workers, page.workers
    # Each stream that ended: how long until the next one was ready, and how many events were
    # published in that gap (the page got them by replay from its Last-Event-ID).
    gaps = [(end, min(r for r in readies if r > end)) for end in ended]
    replayed = sum(1 for t in publisher.published for end, ready in gaps if end < t < ready)
    assert gaps and replayed >= 1, (gaps, replayed)
    return {"live_events": published, "live_lost": 0, "live_duplicated": 0,
            "live_reconnects": len(gaps), "live_replayed": replayed,
            "live_reconnect_s": round(max(ready - end for end, ready in gaps), 2)}


def rendered_config(root: Path) -> dict[str, str]:
    """What install rendered from the environment file: redis.conf, the units, the wrapper."""
    files = [root / "etc/platform/redis.conf", root / "usr/local/bin/platform-manage",
             *sorted((root / "etc/systemd/system").glob("platform*"))]
    return {f.name: f.read_text() for f in files}


def processes_see(running: Box, told: dict[str, str]) -> None:
    """Every running unit's process (systemd's EnvironmentFile= semantics, tests/platform/
    units.py) has the values in its environment exactly as given."""
    for unit, proc in running.procs.items():
        if unit == "platform-redis":
            continue  # no EnvironmentFile=: redis.conf
        environ = psutil.Process(proc.pid).environ()
        assert {k: environ.get(k) for k in told} == told, unit


def installed_box_checks(root: Path, first: subprocess.CompletedProcess[str], base: str,
                         values: dict[str, str], running: Box) -> None:
    """TLS with the generated certificate, no process as root, printed commands as printed."""
    cert = root / "etc/platform/tls/cert.pem"
    session = requests.Session()
    session.trust_env = False
    assert session.get(base + "/healthz", verify=str(cert), timeout=5).ok
    response = session.get(base + "/accounts/login/", verify=str(cert), timeout=5)
    assert response.ok and "Strict-Transport-Security" in response.headers
    processes_see(running, TOLD)
    tree = [p for proc in running.procs.values()
            for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]]
    assert {p.username() for p in tree} == {USER}
    expected = {"Status": "alive: 2", "Beat": "leader"}
    for label, text in expected.items():
        line = re.search(rf"^  {label}\s+(.+)$", first.stdout, re.MULTILINE).group(1)
        run = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=120,
                             env={"PATH": "/usr/sbin:/usr/bin:/bin"})
        assert run.returncode == 0 and text in run.stdout, f"{line}: {run.stdout}{run.stderr}"
    flower = requests.get(f"http://127.0.0.1:{values['FLOWER_PORT']}/", timeout=10)
    assert flower.status_code == 401


class Poller:
    """A monitor polling one URL on a new connection each time, counting failures."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.result = {"ok": 0, "failed": 0, "refused": 0, "slowest_ms": 0.0, "errors": []}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self) -> None:
        while not self.done.is_set():
            started = time.perf_counter()
            try:
                ok = requests.get(self.url, verify=False, timeout=30,
                                  headers={"Connection": "close"}).status_code == 200
            except requests.RequestException as exc:
                ok = False
                self.result["errors"].append(repr(exc)[:200])
                if "refused" in repr(exc).lower():
                    self.result["refused"] += 1
            self.result["ok" if ok else "failed"] += 1
            self.result["slowest_ms"] = max(self.result["slowest_ms"],
                                            round((time.perf_counter() - started) * 1000))
            self.done.wait(0.05)

    def stop(self) -> dict:
        self.done.set()
        self.thread.join()
        return self.result


def _ok(url: str, running: Box | None = None) -> bool:
    if running is not None:
        for unit, proc in running.procs.items():
            assert proc.poll() is None, f"{unit} exited:\n{logs(running.logs)}"
    try:
        return requests.get(url, verify=False, timeout=5).status_code == 200
    except requests.ConnectionError:
        return False


def https_login(base: str, username: str, password: str) -> requests.Session:
    http = requests.Session()
    http.trust_env = False  # else REQUESTS_CA_BUNDLE from the environment overrides verify
    http.verify = False
    http.get(base + "/accounts/login/", timeout=10)
    response = http.post(base + "/accounts/login/", data={
        "username": username, "password": password,
        "csrfmiddlewaretoken": http.cookies["csrftoken"]},
        headers={"Referer": base + "/accounts/login/"}, timeout=10, allow_redirects=False)
    assert response.status_code == 302, response.status_code
    return http


def submit(http: requests.Session, base: str, text: str) -> int:
    response = http.post(base + "/api/documents/", json={"title": text, "text": text},
                         headers={"X-CSRFToken": http.cookies["csrftoken"],
                                  "Referer": base + "/"}, timeout=30)
    assert response.status_code == 202, response.text
    return int(response.json()["id"])


def submit_and_list(http: requests.Session, base: str) -> list[dict]:
    return http.get(base + "/api/documents/", timeout=30).json()["documents"]
