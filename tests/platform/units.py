"""Read an installed systemd unit and run its command line directly, as systemd would.

The test machines have systemd's tools but not systemd as process 1, so the tests start each
unit's ExecStart themselves: same user, environment file, Environment= lines, working
directory and specifiers (%i, %%), ${VAR} expanded from the environment like systemd does.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import socket
import subprocess
from pathlib import Path

from apps.ops.envfile import parse_env_file


def unit_settings(path: Path) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def _specifiers(text: str, instance: str) -> str:
    return re.sub(r"%(.)", lambda m: {"i": instance, "%": "%"}.get(m.group(1), m.group(0)), text)


def listen_socket(path: Path) -> socket.socket:
    """What systemd does for a .socket unit: bind its ListenStream= and listen."""
    host, _, port = unit_settings(path)["ListenStream"][0].rpartition(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(int(unit_settings(path).get("Backlog", ["128"])[0]))
    return sock


def unit_process(path: Path, *, instance: str = "", log: Path,
                 listen: socket.socket | None = None) -> subprocess.Popen[bytes]:
    """Start the unit's ExecStart as its User=, in its own session; output to ``log``.

    ``listen``: the socket of the unit's .socket unit, handed over as fd 3 like systemd does.
    """
    unit = unit_settings(path)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    for env_file in unit.get("EnvironmentFile", []):
        env.update(parse_env_file(Path(env_file.lstrip("-")).read_text()))
    for assignment in unit.get("Environment", []):
        key, _, value = _specifiers(assignment, instance).partition("=")
        env[key] = value
    user = pwd.getpwnam(unit["User"][0])
    env["HOME"] = user.pw_dir
    command = _specifiers(unit["ExecStart"][0], instance)
    command = re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], command)
    argv = shlex.split(command)
    pass_fds: tuple[int, ...] = ()
    if listen is not None:
        # bash: dash cannot name a descriptor above 9 in a redirection.
        argv = ["/bin/bash", "-c", f'exec "$0" "$@" 3<&{listen.fileno()}', *argv]
        pass_fds = (listen.fileno(),)
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv, cwd=unit.get("WorkingDirectory", ["/"])[0], env=env, pass_fds=pass_fds,
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            user=user.pw_uid, group=user.pw_gid, extra_groups=[], start_new_session=True,
        )


def owner_of(path: Path) -> str:
    return pwd.getpwuid(os.stat(path).st_uid).pw_name
