"""`platform/install --join FILE`: an app host takes the data host's shared values from a copy
of its platform.env, read as data (never run, never printed), checked before anything is
written, by Redis URL or by Sentinel."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import pytest

from apps.ops.envfile import parse_env_file
from tests.procs import ROOT

SECRET_KEY = secrets.token_urlsafe(48)
REDIS_PASSWORD = secrets.token_urlsafe(24)
SENTINEL_PASSWORD = secrets.token_urlsafe(24)
DATABASE_URL = (f"postgres://platform:{secrets.token_urlsafe(16)}@10.0.0.2:5433/platform"
                "?sslmode=verify-full&sslrootcert=/etc/platform/tls/ca.pem")
# What the data host's /etc/platform/platform.env holds (platform/release.sh ensure_env_file),
# values of its own the app host must not take included.
DATA_HOST_ENV = f"""# Written once by platform/install
DJANGO_SETTINGS_MODULE=config.settings.production
DJANGO_SECRET_KEY={SECRET_KEY}
DJANGO_ALLOWED_HOSTS=data.example,localhost,127.0.0.1
DATABASE_URL={DATABASE_URL}
PLATFORM_ROLES=data
REDIS_PASSWORD={REDIS_PASSWORD}
REDIS_BIND=10.0.0.2
REDIS_URL=rediss://:{REDIS_PASSWORD}@10.0.0.2:6390/0
REDIS_TLS_CA_FILE=/etc/platform/tls/ca.pem
FLOWER_BASIC_AUTH=admin:data-host-only
"""
SENTINEL_ENV = f"""DJANGO_SECRET_KEY={SECRET_KEY}
DATABASE_URL={DATABASE_URL}
REDIS_SENTINELS=10.0.0.2:26379,10.0.0.3:26379,10.0.0.4:26379
REDIS_SENTINEL_MASTER=site-redis
REDIS_PASSWORD={REDIS_PASSWORD}
REDIS_SENTINEL_PASSWORD={SENTINEL_PASSWORD}
REDIS_TLS=true
"""
SECRETS = (SECRET_KEY, REDIS_PASSWORD, SENTINEL_PASSWORD, DATABASE_URL.split("@")[0])


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PYTEST_", "DJANGO_", "REDIS_", "POSTGRES_"))
            and k not in ("DATABASE_URL", "PLATFORM_ROLES")}


def join_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "platform.env"
    path.write_text(text)
    path.chmod(mode)
    return path


def write_env_via_join(tmp_path: Path, text: str,
                       **extra: str) -> tuple[dict[str, str], str]:
    """The installer's join path up to the environment file, in a temporary root (no user,
    no release): join_file_read, join_values_check, ensure_env_file."""
    root = tmp_path / "root"
    script = ('set -euo pipefail; . platform/lib.sh; . platform/release.sh; '
              'release_layout "$ROOT_DIR"; PLATFORM_USER=root; mkdir -p "$ETC_DIR/tls"; '
              'join_file_read "$JOIN"; join_values_check; ensure_env_file app.example')
    ca = tmp_path / "ca.pem"
    ca.write_text("a CA certificate\n")
    # The CA's path on this host wins over the data host's path in the file.
    env = {**clean_env(), "ROOT_DIR": str(root), "JOIN": str(join_file(tmp_path, text)),
           "PLATFORM_ROLES": "web,workers,beat", "REDIS_TLS_CA_FILE": str(ca), **extra}
    result = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    written = parse_env_file((root / "etc/platform/platform.env").read_text())
    return written, result.stdout + result.stderr


def test_join_takes_the_shared_values_and_leaves_the_data_hosts_own(tmp_path):
    written, output = write_env_via_join(tmp_path, DATA_HOST_ENV)
    assert written["DJANGO_SECRET_KEY"] == SECRET_KEY
    assert written["DATABASE_URL"] == DATABASE_URL
    assert written["REDIS_URL"] == f"rediss://:{REDIS_PASSWORD}@10.0.0.2:6390/0"
    assert written["REDIS_TLS_CA_FILE"] == str(tmp_path / "root/etc/platform/tls/ca.pem")
    assert written["PLATFORM_ROLES"] == "web,workers,beat"
    assert written["FLOWER_BASIC_AUTH"] != "admin:data-host-only"
    assert not any(value in output for value in SECRETS)


def test_join_by_sentinel_writes_the_sentinel_settings(tmp_path):
    written, output = write_env_via_join(tmp_path, SENTINEL_ENV)
    assert "REDIS_URL" not in written
    assert written["REDIS_SENTINELS"] == "10.0.0.2:26379,10.0.0.3:26379,10.0.0.4:26379"
    assert written["REDIS_PASSWORD"] == REDIS_PASSWORD
    assert written["REDIS_SENTINEL_PASSWORD"] == SENTINEL_PASSWORD
    assert written["REDIS_TLS"] == "true"
    assert written["REDIS_SENTINEL_MASTER"] == "site-redis"
    assert not any(value in output for value in SECRETS)


def test_plain_text_is_joined_only_when_the_operator_says_so(tmp_path):
    plain = DATA_HOST_ENV.replace("rediss://", "redis://").replace(
        "?sslmode=verify-full&sslrootcert=/etc/platform/tls/ca.pem", "")
    written, _ = write_env_via_join(tmp_path, plain, PLATFORM_REQUIRE_TLS="false")
    assert written["PLATFORM_REQUIRE_TLS"] == "false"
    assert written["REDIS_URL"].startswith("redis://")


@pytest.mark.parametrize(("text", "mode", "message"), [
    (DATA_HOST_ENV, 0o644, "open to every user of this machine"),
    ("DJANGO_SECRET_KEY=x\n$(touch /tmp/never)\n", 0o600, "line 2: expected KEY=VALUE"),
    (DATA_HOST_ENV.replace("REDIS_URL=", "#"), 0o600, "REDIS_URL and DATABASE_URL"),
    (SENTINEL_ENV.replace("REDIS_SENTINEL_PASSWORD=", "#"), 0o600,
     "REDIS_URL and DATABASE_URL"),
    (DATA_HOST_ENV.replace(DATABASE_URL, "sqlite:////var/lib/platform/db.sqlite3"), 0o600,
     "a SQLite file cannot be shared"),
    (DATA_HOST_ENV.replace("@10.0.0.2:6390", "@127.0.0.1:6390"), 0o600,
     "REDIS_URL names this machine"),
    # TLS required by default on a host without data (production settings would refuse).
    (DATA_HOST_ENV.replace("rediss://", "redis://"), 0o600,
     "reaches Redis over TLS by default"),
    (DATA_HOST_ENV.replace("sslmode=verify-full", "sslmode=require"), 0o600,
     "reaches PostgreSQL over TLS by default"),
    # The data host's CA path, not copied to this host.
    (DATA_HOST_ENV, 0o600, "REDIS_TLS_CA_FILE is not a file on this host"),
])
def test_install_join_refuses_bad_files_before_writing_anything(tmp_path, text, mode,
                                                                 message):
    result = subprocess.run(
        ["bash", "platform/install", "--prefix", str(tmp_path / "root"), "--roles",
         "web,workers", "--join", str(join_file(tmp_path, text, mode))],
        cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert message in result.stderr, result.stderr
    assert not any(value in result.stdout + result.stderr for value in SECRETS)
    assert not (tmp_path / "root").exists()
