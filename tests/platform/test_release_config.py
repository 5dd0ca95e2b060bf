"""What platform/install was told survives: the configuration rendered by the first install
(redis.conf with replicaof, the sentinel's file with its port and address, the units) is
rendered byte for byte again by upgrade's path and by a second install, from the environment
file alone, in a temporary root."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.procs import ROOT

FIRST = ('set -euo pipefail; . platform/lib.sh; . platform/release.sh; '
         'release_layout "$ROOT_DIR"; PLATFORM_USER=root; '
         'mkdir -p "$ETC_DIR/tls" "$UNIT_DIR" "$ROOT_DIR/usr/local/bin" "$DATA_DIR"; ')
# A replica data host of a Sentinel group, its sentinel on a port and address of its own.
TOLD = {"PLATFORM_ROLES": "data", "REDIS_BIND": "127.0.0.2", "REDIS_PORT": "6391",
        "REDIS_REPLICA_OF": "127.0.0.3 6390", "SENTINEL_PORT": "26401",
        "SENTINEL_BIND": "127.0.0.2", "REDIS_SENTINELS": "127.0.0.2:26401,127.0.0.3:26400",
        "REDIS_SENTINEL_PASSWORD": "sentinel pass 'with' $(quotes)",
        "REDIS_PASSWORD": 'data "pass" \\ with # spaces'}


def run(root: Path, script: str, extra: dict[str, str]) -> None:
    env = {"PATH": os.environ["PATH"], "ROOT_DIR": str(root), **extra}
    result = subprocess.run(["bash", "-c", FIRST + script], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def rendered(root: Path) -> dict[str, str]:
    files = [root / "etc/platform/redis.conf", root / "var/lib/platform/sentinel/sentinel.conf",
             *sorted((root / "etc/systemd/system").glob("platform*")),
             root / "usr/local/bin/platform-manage"]
    return {str(f.relative_to(root)): f.read_text() for f in files}


def test_upgrade_and_a_second_install_render_what_the_first_install_rendered(tmp_path):
    root = tmp_path / "root"
    run(root, "ensure_env_file box.example; render_host_config", TOLD)
    first = rendered(root)
    redis_conf = first["etc/platform/redis.conf"]
    assert "replicaof 127.0.0.3 6390" in redis_conf
    assert 'requirepass "data \\"pass\\" \\\\ with # spaces"' in redis_conf
    sentinel = first["var/lib/platform/sentinel/sentinel.conf"]
    assert "port 26401" in sentinel and "bind 127.0.0.2" in sentinel

    sentinel_file = root / "var/lib/platform/sentinel/sentinel.conf"
    # Upgrade's path: nothing in the environment but the file (the sentinel's file is written
    # once; removed here so that its rendering is compared too).
    sentinel_file.unlink()
    run(root, "env_file_load_installed; render_host_config", {})
    assert rendered(root) == first
    # A second install, told nothing this time.
    sentinel_file.unlink()
    run(root, "ensure_env_file box.example; render_host_config", {})
    assert rendered(root) == first
