"""The README's first command: `bash platform/up` starts the whole platform, a second run
reports it, and Ctrl-C stops every process. Runs the real script on free ports."""

from __future__ import annotations

import os
import re
import signal
import subprocess

import psutil
import pytest
import requests

from tests.platform.up_script import stop_leftovers
from tests.procs import BIN, ROOT, free_port, wait_until

pytestmark = pytest.mark.processes


def test_platform_up_starts_everything_reports_twice_and_stops_on_ctrl_c(tmp_path, measure):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    env.update({"PLATFORM_VAR_DIR": str(tmp_path / "var"), "VENV": str(BIN.parent),
                "REDIS_PORT": str(free_port()), "WEB_PORT": str(free_port()),
                "FLOWER_PORT": str(free_port())})
    log = open(tmp_path / "up.log", "w")
    up = subprocess.Popen(["bash", "platform/up"], cwd=ROOT, env=env, stdout=log,
                          stderr=subprocess.STDOUT, start_new_session=True)
    output = lambda: (tmp_path / "up.log").read_text()  # noqa: E731
    try:
        wait_until(lambda: "running; press Ctrl-C to stop" in output(), timeout=180,
                   what="platform/up reports the platform running")
        text = output()
        assert "log in as dev / " in text and f"http://127.0.0.1:{env['WEB_PORT']}/" in text
        for name in ("redis", "web", "worker:worker1", "worker:worker2", "beat:beat1",
                     "beat:beat2", "flower"):
            assert re.search(rf"^{name}\s+RUNNING", text, re.MULTILINE), f"{name} not running"

        # The development login works, and Flower wants its password.
        password = text.split("log in as dev / ", 1)[1].split()[0]
        web = f"http://127.0.0.1:{env['WEB_PORT']}"
        session = requests.Session()
        session.get(web + "/accounts/login/", timeout=10)
        response = session.post(web + "/accounts/login/", data={
            "username": "dev", "password": password,
            "csrfmiddlewaretoken": session.cookies["csrftoken"]}, timeout=10)
        assert response.url.endswith("/documents/")
        flower = f"http://127.0.0.1:{env['FLOWER_PORT']}/"
        assert requests.get(flower, timeout=10).status_code == 401

        # Every command the start output prints works exactly as printed, from a new shell
        # that has none of the platform's variables (the user's own terminal).
        bare = {k: v for k, v in env.items()
                if k not in ("PLATFORM_VAR_DIR", "REDIS_PORT", "WEB_PORT", "FLOWER_PORT")}
        bare["PATH"] = "/usr/local/bin:/usr/bin:/bin"
        printed = {label: printed_command(text, label) for label in ("Status", "Beat", "Processes")}
        runs = {label: subprocess.run(["bash", "-c", line], cwd=ROOT, env=bare, timeout=90,
                                      capture_output=True, text=True)
                for label, line in printed.items()}
        for label, run in runs.items():
            assert run.returncode == 0, f"{printed[label]!r} failed:\n{run.stdout}{run.stderr}"
        assert "alive: 2" in runs["Status"].stdout
        assert "leader" in runs["Beat"].stdout
        assert re.search(r"^beat:beat1\s+RUNNING", runs["Processes"].stdout, re.MULTILINE)
        assert re.search(r"^  appendfsync\s+everysec$", runs["Status"].stdout, re.MULTILINE)
        assert re.search(r"^  maxmemory_policy\s+noeviction$", runs["Status"].stdout, re.MULTILINE)
        ready = requests.get(printed_command(text, "Health"), timeout=10)
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"]["workers"]["alive"] == 2

        again = subprocess.run(["bash", "platform/up"], cwd=ROOT, env=env, timeout=120,
                               capture_output=True, text=True)
        assert again.returncode == 0 and "already running" in again.stderr

        children = psutil.Process(up.pid).children(recursive=True)
        os.killpg(up.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends
        assert up.wait(timeout=120) == 0
        assert "stopped" in output()
        gone, alive = psutil.wait_procs(children, timeout=30)
        assert alive == [], f"left running: {[p.cmdline() for p in alive]}"
        measure(processes_started=len(children), processes_left=len(alive))
    finally:
        stop_leftovers(up, tmp_path / "var" / "supervisord.pid")


def printed_command(output: str, label: str) -> str:
    match = re.search(rf"^  {label}\s+(.+)$", output, re.MULTILINE)
    assert match, f"platform/up printed no {label} line"
    return match.group(1).strip()
