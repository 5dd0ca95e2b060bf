"""A data host's Redis or PostgreSQL bound to the any-address (0.0.0.0, ::, *) is refused
unless the operator says so (REDIS_BIND_ANY=yes, POSTGRES_BIND_ANY=yes): it would also serve
every other network the host is on. platform/lib.sh data_bind_check, used by platform/up,
platform/install and the PostgreSQL start."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.procs import ROOT

pytestmark = pytest.mark.past_one_box


def bind_check(roles: str, bind: str, name: str = "REDIS_BIND",
               **env: str) -> subprocess.CompletedProcess[str]:
    script = f'. platform/lib.sh; data_bind_check "{roles}" "$BIND" {name}; echo accepted'
    base = {k: v for k, v in os.environ.items() if not k.endswith("_BIND_ANY")}
    return subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=30, env={**base, "BIND": bind, **env})


@pytest.mark.parametrize("bind", ["0.0.0.0", "::", "*", "10.0.0.2 0.0.0.0"])
@pytest.mark.parametrize("roles", ["data", "web,workers,beat,flower,data"])
@pytest.mark.parametrize("name", ["REDIS_BIND", "POSTGRES_BIND"])
def test_the_any_address_is_refused_unless_meant(roles, bind, name):
    refused = bind_check(roles, bind, name)
    assert refused.returncode == 1 and "accepted" not in refused.stdout
    assert f"{name}={bind} listens on every network" in refused.stderr
    assert f"set {name}_ANY=yes" in refused.stderr
    meant = bind_check(roles, bind, name, **{f"{name}_ANY": "yes"})
    assert meant.returncode == 0 and "accepted" in meant.stdout, meant.stderr


@pytest.mark.parametrize(("roles", "bind", "accepted"), [
    ("data", "10.0.0.2", True),
    ("data", "127.0.0.1", False),  # loopback only on a data-only host: nobody reaches it
    ("web,workers,beat,flower,data", "127.0.0.1", True),  # one box, unchanged
    ("web,workers", "0.0.0.0", True),  # no data role: this host binds no Redis
])
def test_other_binds_are_unchanged(roles, bind, accepted):
    assert (bind_check(roles, bind).returncode == 0) is accepted


def test_platform_up_refuses_redis_on_the_any_address_before_starting(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "DJANGO_")) and not k.endswith("_BIND_ANY")}
    env.update({"PLATFORM_VAR_DIR": str(tmp_path / "var"), "PLATFORM_ROLES": "data",
                "REDIS_BIND": "0.0.0.0", "VENV": str(ROOT / ".venv")})
    result = subprocess.run(["bash", "platform/up"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "REDIS_BIND=0.0.0.0 listens on every network" in result.stderr
    assert not (tmp_path / "var" / "supervisord.pid").exists()
