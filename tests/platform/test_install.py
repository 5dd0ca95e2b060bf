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
from pathlib import Path

import psutil
import pytest
import requests
import urllib3

from apps.ops.envfile import parse_env_file
from celery_conf.names import Queue
from tests.platform.units import owner_of, unit_process, unit_settings
from tests.procs import ROOT, free_port, wait_until

pytestmark = pytest.mark.processes
USER = "platform-test"


@pytest.fixture(scope="module")
def box():
    # A root every user can traverse (pytest's own temporary directories are root-only).
    root = Path(tempfile.mkdtemp(prefix="platform-box-"))
    root.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    env.update({"PLATFORM_USER": USER, "WEB_HOST": "127.0.0.1", "WEB_PORT": str(free_port()),
                "REDIS_PORT": str(free_port()), "FLOWER_PORT": str(free_port())})
    first = install(root, env)
    yield root, env, first
    subprocess.run(["rm", "-rf", str(root)], check=False)


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
    assert len(values["DJANGO_SECRET_KEY"]) >= 50 and len(values["REDIS_PASSWORD"]) >= 16
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
    measure(installed_files=len(before), changed_by_second_install=0)


def test_units_verify_clean_and_match_the_queues(box):
    root, _, _ = box
    units = sorted((root / "etc/systemd/system").glob("platform*"))
    assert len(units) == 6
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


def test_installed_units_run_as_the_user_and_the_box_is_ready(box, tmp_path, measure):
    root, env, first = box
    units = root / "etc/systemd/system"
    procs: list[subprocess.Popen[bytes]] = []
    values = parse_env_file((root / "etc/platform/platform.env").read_text())
    try:
        for name, instance in (("platform-redis.service", ""), ("platform-worker@.service", "1"),
                               ("platform-beat@.service", "1"), ("platform-beat@.service", "2"),
                               ("platform-web.service", ""), ("platform-flower.service", "")):
            procs.append(unit_process(units / name, instance=instance,
                                      log=tmp_path / f"{name}{instance}.log"))
        base = f"https://127.0.0.1:{values['WEB_PORT']}"
        urllib3.disable_warnings()

        def ready() -> bool:
            for proc in procs:
                assert proc.poll() is None, "a unit's process exited:\n" + logs(tmp_path)
            try:
                return requests.get(base + "/readyz", verify=False, timeout=5).status_code == 200
            except requests.ConnectionError:
                return False

        wait_until(ready, timeout=120, what="the installed box answers /readyz with 200")
        # TLS with the generated certificate, HTTP redirected nowhere (there is no HTTP).
        cert = root / "etc/platform/tls/cert.pem"
        assert requests.get(base + "/healthz", verify=str(cert), timeout=5).ok
        response = requests.get(base + "/accounts/login/", verify=False, timeout=5)
        assert response.ok and "Strict-Transport-Security" in response.headers

        # No process of the platform runs as root.
        tree = [p for proc in procs for p in [psutil.Process(proc.pid),
                                               *psutil.Process(proc.pid).children(recursive=True)]]
        assert {p.username() for p in tree} == {USER}

        # The printed commands work as printed.
        for label in ("Status", "Beat"):
            line = re.search(rf"^  {label}\s+(.+)$", first.stdout, re.MULTILINE).group(1)
            run = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=120,
                                 env={"PATH": "/usr/sbin:/usr/bin:/bin"})
            assert run.returncode == 0, f"{line}: {run.stdout}{run.stderr}"
        flower = requests.get(f"http://127.0.0.1:{values['FLOWER_PORT']}/", timeout=10)
        assert flower.status_code == 401
        measure(processes=len(tree))
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def logs(directory: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                     for p in sorted(directory.glob("*.log")))
