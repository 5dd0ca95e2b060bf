"""Run the real `bash platform/up` on free ports in a test: its environment, the script in
its own session with its output in a file, and the clean-up after a failure."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from tests.procs import BIN, ROOT, free_port, wait_until


def up_env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    """platform/up's environment: this test's var/, the shared venv, free ports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    env.update({"PLATFORM_VAR_DIR": str(tmp_path / "var"), "VENV": str(BIN.parent),
                "REDIS_PORT": str(free_port()), "WEB_PORT": str(free_port()),
                "FLOWER_PORT": str(free_port())})
    env.update(overrides)
    return env


@contextmanager
def platform_up(tmp_path: Path, env: dict[str, str], *, timeout: float = 180,
                log_name: str = "up.log", netns: str | None = None,
                ) -> Iterator[tuple[subprocess.Popen, Callable[[], str]]]:
    """Start platform/up (inside network namespace ``netns`` if given: a host of
    tests/netns.py), wait for "running", yield (the script, its output so far); stop
    whatever is left afterwards."""
    log = open(tmp_path / log_name, "w")
    inside = ["ip", "netns", "exec", netns] if netns else []
    up = subprocess.Popen([*inside, "bash", "platform/up"], cwd=ROOT, env=env, stdout=log,
                          stderr=subprocess.STDOUT, start_new_session=True)
    output = lambda: (tmp_path / log_name).read_text()  # noqa: E731
    try:
        wait_until(lambda: "running; press Ctrl-C to stop" in output() or up.poll() is not None,
                   timeout=timeout, what="platform/up reports the platform running")
        assert up.poll() is None, f"platform/up exited:\n{output()}"
        yield up, output
    finally:
        stop_leftovers(up, Path(env["PLATFORM_VAR_DIR"]) / "supervisord.pid")
        log.close()


def stop_leftovers(up: subprocess.Popen, pidfile: Path) -> None:
    """After a failure: stop the script, its supervisord (own session) and every child."""
    if up.poll() is None:
        os.killpg(up.pid, signal.SIGKILL)
    if not pidfile.exists():
        return
    try:
        supervisor = psutil.Process(int(pidfile.read_text()))
    except (psutil.NoSuchProcess, ValueError):
        return
    tree = [supervisor, *supervisor.children(recursive=True)]
    supervisor.terminate()
    _, alive = psutil.wait_procs(tree, timeout=30)
    for proc in alive:
        proc.kill()


def program_states(text: str, names: list[str]) -> dict[str, str]:
    """supervisorctl status lines -> {program: state}, "absent" when not listed."""
    states = {}
    for name in names:
        match = re.search(rf"^{re.escape(name)}\s+(\w+)", text, re.MULTILINE)
        states[name] = match.group(1) if match else "absent"
    return states


def supervisorctl(env: dict[str, str], *args: str) -> str:
    sock = Path(env["PLATFORM_VAR_DIR"]) / "supervisor.sock"
    result = subprocess.run([str(BIN / "supervisorctl"), "-s", f"unix://{sock}", *args],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    return result.stdout
