"""The README's first command: `bash platform/up` starts the whole platform without a warning,
every command it prints works, a second run reports the running platform and changes nothing,
every command the manual shows for a running platform works as printed, Ctrl-C stops every
process, and a restart keeps the browser's session. Runs the real script on free ports, with
its virtual environment given by VENV outside the checkout."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import requests

from tests.docs_commands import all_blocks, bare_env, by_page, run_blocks
from tests.platform.up_script import platform_up, up_env
from tests.procs import BIN, ROOT, wait_until

pytestmark = pytest.mark.processes


def test_platform_up_runs_what_it_and_the_manual_print_and_restarts_keeping_sessions(
        tmp_path, measure):
    venv = tmp_path / "elsewhere-venv"
    venv.symlink_to(BIN.parent)  # VENV outside the checkout: printed as it is
    env = up_env(tmp_path, VENV=str(venv))
    var = Path(env["PLATFORM_VAR_DIR"])
    web = f"http://127.0.0.1:{env['WEB_PORT']}"

    with platform_up(tmp_path, env) as (up, output):
        started = output()
        assert not re.search(r"WARNING|Traceback|ERROR", started), started
        assert "log in as dev / " in started and f"{web}/" in started
        for name in ("redis", "web", "worker:worker1", "worker:worker2", "beat:beat1",
                     "beat:beat2", "flower"):
            assert re.search(rf"^{name}\s+RUNNING", started, re.MULTILINE), f"{name} not running"
        assert printed_command(started, "Status").startswith(
            f"PLATFORM_VAR_DIR={var} {venv}/bin/python manage.py status")

        # The development login works, and Flower wants its password.
        password = started.split("log in as dev / ", 1)[1].split()[0]
        browser = log_in(web, password)
        flower = f"http://127.0.0.1:{env['FLOWER_PORT']}/"
        assert requests.get(flower, timeout=10).status_code == 401

        # Every command the start output prints works exactly as printed, from a new shell
        # that has none of the platform's variables (the user's own terminal).
        printed = {label: printed_command(started, label) for label in ("Status", "Beat",
                                                                       "Processes")}
        runs = {label: subprocess.run(["bash", "-c", line], cwd=ROOT, env=bare_env(),
                                      timeout=90, capture_output=True, text=True)
                for label, line in printed.items()}
        for label, run in runs.items():
            assert run.returncode == 0, f"{printed[label]!r} failed:\n{run.stdout}{run.stderr}"
        assert "alive: 2" in runs["Status"].stdout
        assert "leader" in runs["Beat"].stdout
        assert re.search(r"^beat:beat1\s+RUNNING", runs["Processes"].stdout, re.MULTILINE)
        assert re.search(r"^  appendfsync\s+everysec$", runs["Status"].stdout, re.MULTILINE)
        assert re.search(r"^  since\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(.+ ago\)$",
                         runs["Status"].stdout, re.MULTILINE), runs["Status"].stdout
        ready = requests.get(printed_command(started, "Health"), timeout=10)
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"]["workers"]["alive"] == 2

        # Again, from a shell that sets none of the ports (nor VENV): it reports the platform
        # that runs, with its real addresses and interpreter, and changes no file.
        files = {path: (path.read_bytes(), path.stat().st_mtime_ns)
                 for path in (var / "platform.env", var / "dev.env", var / "redis.conf")}
        again = subprocess.run(["bash", "platform/up"], cwd=ROOT, timeout=120,
                               env=bare_env(PLATFORM_VAR_DIR=str(var)),
                               capture_output=True, text=True)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "already running; nothing was changed" in again.stderr
        assert f"{web}/" in again.stdout and ":8000" not in again.stdout
        assert f"http://127.0.0.1:{env['FLOWER_PORT']}/" in again.stdout
        assert printed_command(again.stdout, "Status") == printed_command(started, "Status")
        assert re.search(r"^worker:worker2\s+RUNNING", again.stdout, re.MULTILINE)
        assert {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in files} == files

        # Every command the manual shows for a running platform, as printed (the documented
        # ports and var/ replaced by this platform's: tests/docs_commands.py).
        ports = {"web": env["WEB_PORT"], "flower": env["FLOWER_PORT"], "redis": env["REDIS_PORT"]}
        blocks = [b for b in all_blocks() if b.info == "console running"]
        commands_started = time.monotonic()
        failures: list[str] = []
        for page in by_page(blocks):  # a Redis killed on one page is back for the next
            wait_until(lambda: requests.get(web + "/readyz", timeout=5).status_code == 200,
                       timeout=90, interval=0.5, what="the platform ready before " + page[0].where)
            failures += run_blocks(page, env=bare_env(PLATFORM_VAR_DIR=str(var)),
                                   ports=ports, var_dir=var)
        assert failures == [], "\n\n".join(failures)
        commands_s = time.monotonic() - commands_started
        still = browser.get(web + "/documents/", timeout=10, allow_redirects=False)
        assert still.status_code == 200

        stop(up, output)

    # Started again: the same data, the same login, and the browser's session still valid
    # (ensure_dev_user leaves the user alone: a new password hash would have ended it).
    with platform_up(tmp_path, env, log_name="up-again.log") as (up, output):
        restarted = output()
        assert "development user 'dev' kept as it was" in restarted
        assert not re.search(r"WARNING|Traceback|ERROR", restarted), restarted
        page = browser.get(web + "/documents/", timeout=10, allow_redirects=False)
        assert page.status_code == 200, "the restart logged the browser out"
        left = stop(up, output)
    measure(manual_blocks_run=len(blocks), manual_commands_s=round(commands_s, 1),
            processes_left=left)


def log_in(web: str, password: str) -> requests.Session:
    session = requests.Session()
    session.get(web + "/accounts/login/", timeout=10)
    response = session.post(web + "/accounts/login/", data={
        "username": "dev", "password": password,
        "csrfmiddlewaretoken": session.cookies["csrftoken"]}, timeout=10)
    assert response.url.endswith("/documents/")
    return session


def stop(up: subprocess.Popen, output) -> int:  # type: ignore[no-untyped-def]
    """Ctrl-C, as the terminal sends it; every process gone afterwards. Returns how many were
    left (asserted zero)."""
    children = psutil.Process(up.pid).children(recursive=True)
    os.killpg(up.pid, signal.SIGINT)
    assert up.wait(timeout=120) == 0
    assert "stopped" in output()
    _, alive = psutil.wait_procs(children, timeout=30)
    assert alive == [], f"left running: {[p.cmdline() for p in alive]}"
    return len(alive)


def printed_command(output: str, label: str) -> str:
    match = re.search(rf"^  {label}\s+(.+)$", output, re.MULTILINE)
    assert match, f"platform/up printed no {label} line"
    return match.group(1).strip()
