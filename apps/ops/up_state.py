"""What ``platform/up`` prints: the running platform's addresses, logins and commands.

Read from the files that platform's start wrote (``var/platform.env``, ``var/dev.env``), never
from the shell running ``platform/up`` now: a second run without the same ``WEB_PORT`` or
``VENV`` still prints the addresses and interpreter the platform really uses, and changes
nothing. Standard library only, so it runs before the virtual environment exists::

    python3 -m apps.ops.up_state report VAR_DIR   # running: status and banner, exit 0; else 3
    python3 -m apps.ops.up_state banner VAR_DIR   # the banner only (after a start)
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

# The one place platform/up's values are parsed (issue 17 may replace the parser).
from apps.ops.envfile import EnvFileError, parse_env_file

ROOT = Path(__file__).resolve().parents[2]
NOT_RUNNING = 3


def defaults() -> dict[str, str]:
    """platform/lib.sh's defaults, for a platform started before its env file held them."""
    return {"WEB_HOST": "127.0.0.1", "WEB_PORT": "8000", "FLOWER_PORT": "5555",
            "VENV": str(ROOT / ".venv"), "PLATFORM_ROLES": "web,workers,beat,flower,data",
            "PLATFORM_HOST_NAME": socket.gethostname()}


def supervisor_answers(var_dir: Path) -> bool:
    """A supervisord listens on the platform's socket (a stale socket file refuses)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(2)
    try:
        sock.connect(str(var_dir / "supervisor.sock"))
    except OSError:
        return False
    finally:
        sock.close()
    return True


def _read(path: Path) -> dict[str, str]:
    try:
        return parse_env_file(path.read_text())
    except FileNotFoundError:
        return {}
    except EnvFileError as exc:
        raise SystemExit(f"platform: {path}: {exc}") from None


def values(var_dir: Path) -> dict[str, str]:
    """The running platform's values: dev.env's logins, platform.env's addresses (which win)."""
    return {**defaults(), **_read(var_dir / "dev.env"), **_read(var_dir / "platform.env")}


def typed_path(path: Path) -> str:
    """How to type ``path`` from the checkout: relative inside it, absolute outside."""
    absolute = Path(os.path.abspath(path))  # not resolve(): the venv's python is a symlink
    try:
        return str(absolute.relative_to(ROOT))
    except ValueError:
        return str(path)


def url_host(host: str | None) -> str:
    """A host as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if host and ":" in host else str(host)


def redis_where(v: dict[str, str]) -> str:
    if v.get("REDIS_SENTINELS"):
        return (f"sentinels {v['REDIS_SENTINELS']} (group {v.get('REDIS_SENTINEL_MASTER', '')};"
                " passwords in var/dev.env)")
    url = urlsplit(v.get("REDIS_URL", ""))
    return f"{url_host(url.hostname)}:{url.port}{url.path} (password in var/dev.env or REDIS_URL)"


def banner(var_dir: Path) -> str:
    v = values(var_dir)
    python = typed_path(Path(v["VENV"]) / "bin" / "python")
    supervisorctl = typed_path(Path(v["VENV"]) / "bin" / "supervisorctl")
    prefix = "" if os.path.abspath(var_dir) == str(ROOT / "var") else f"PLATFORM_VAR_DIR={var_dir} "
    flower_user, _, flower_password = v.get("FLOWER_BASIC_AUTH", "").partition(":")
    web = f"http://{url_host(v['WEB_HOST'])}:{v['WEB_PORT']}"
    local = f"http://127.0.0.1:{v['WEB_PORT']}"
    rows = [
        ("Roles", f"{v['PLATFORM_ROLES']} on {v['PLATFORM_HOST_NAME']}"),
        ("Platform", f"{web}/         log in as {v.get('DEV_USER', 'dev')} / "
                     f"{v.get('DEV_USER_PASSWORD', '(see var/dev.env)')}"),
        ("Django admin", f"{local}/admin/"),
        ("Flower", f"http://127.0.0.1:{v['FLOWER_PORT']}/     user {flower_user} / "
                   f"{flower_password}"),
        ("Redis", redis_where(v)),
        ("Health", f"{local}/readyz"),
        ("Status", f"{prefix}{python} manage.py status"),
        ("Beat", f"{prefix}{python} manage.py beat_status"),
        ("Processes", f"{supervisorctl} -s unix://{var_dir}/supervisor.sock status"),
        ("Logs", f"{var_dir}/log/"),
    ]
    return "\n" + "\n".join(f"  {label:<15} {text}" for label, text in rows) + "\n"


def report(var_dir: Path) -> int:
    if not supervisor_answers(var_dir):
        return NOT_RUNNING
    print("\033[1m==> the platform is already running; nothing was changed\033[0m",
          file=sys.stderr)
    supervisorctl = Path(values(var_dir)["VENV"]) / "bin" / "supervisorctl"
    if supervisorctl.exists():
        subprocess.run([str(supervisorctl), "-s", f"unix://{var_dir}/supervisor.sock", "status"],
                       timeout=60, check=False)
    print(banner(var_dir), flush=True)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("report", "banner"):
        print(__doc__, file=sys.stderr)
        return 2
    var_dir = Path(argv[1])
    if argv[0] == "banner":
        print(banner(var_dir), flush=True)
        return 0
    return report(var_dir)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
