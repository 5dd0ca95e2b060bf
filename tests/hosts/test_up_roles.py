"""`platform/up` on a host with some roles starts only their programs, pointed at the data
host; the installer's target wants only their units, and no unit pulls in Redis."""

from __future__ import annotations

import os
import re
import signal
import subprocess

import pytest
import redis

from tests.hosts.cluster import DataHost, free_port_on, make_certs
from tests.platform.up_script import platform_up, up_env
from tests.procs import BIN, ROOT, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.past_one_box]
PROGRAMS = {"redis": "data", "web": "web", "worker:worker1": "workers",
            "worker:worker2": "workers", "beat:beat1": "beat", "beat:beat2": "beat",
            "flower": "flower"}


def test_platform_up_starts_only_the_roles_of_its_host(tmp_path, measure):
    data = DataHost(tmp_path / "data", migrate=False)
    env = up_env(tmp_path, PLATFORM_ROLES="workers,beat", PLATFORM_HOST_NAME="hostU",
                 REDIS_URL=data.redis.url, DATABASE_URL=data.database_url)
    try:
        # Without the data host's addresses it refuses before starting anything.
        refused = subprocess.run(["bash", "platform/up"], cwd=ROOT, capture_output=True,
                                 text=True, timeout=120,
                                 env={k: v for k, v in env.items() if k != "REDIS_URL"})
        assert refused.returncode == 1 and "has no 'data'" in refused.stderr, refused.stderr
        assert not (tmp_path / "var" / "supervisord.pid").exists()

        with platform_up(tmp_path, env) as (up, output):
            text = output()
            states = {name: re.search(rf"^{re.escape(name)}\s+(\w+)", text, re.MULTILINE)
                      for name in PROGRAMS}
            states = {name: m.group(1) if m else "absent" for name, m in states.items()}
            expected = {name: "RUNNING" if role in ("workers", "beat") else "STOPPED"
                        for name, role in PROGRAMS.items()}
            assert states == expected
            assert not (tmp_path / "var" / "redis.conf").exists()  # no Redis of its own
            # Its workers joined the data host's Redis under this host's name.
            client = data.redis.client()
            assert {k for k in client.scan_iter("platform:worker:*")} == {
                "platform:worker:worker1@hostU", "platform:worker:worker2@hostU"}
            wait_until(lambda: client.get("platform:beat::lock"), timeout=60,
                       what="one of its beats leads")
            os.killpg(up.pid, signal.SIGTERM)
            assert up.wait(timeout=120) == 0
        measure(running=sum(s == "RUNNING" for s in states.values()),
                stopped=sum(s == "STOPPED" for s in states.values()))
    finally:
        data.stop()


def role_units(roles: str) -> list[str]:
    """The units of ``roles``; a space then VAR=value assignments (``"data REDIS_X=1"``)."""
    script = ('. platform/lib.sh; . platform/release.sh; release_layout ""; '
              f'PLATFORM_ROLES={roles} role_units')
    result = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True,
                            text=True, timeout=30, check=True)
    return result.stdout.split()


def test_the_installed_target_wants_only_the_units_of_the_roles():
    assert role_units("workers,beat") == [
        "platform-worker@1.service", "platform-worker@2.service",
        "platform-beat@1.service", "platform-beat@2.service"]
    assert role_units("data") == ["platform-redis.service"]
    everything = role_units("web,workers,beat,flower,data")
    assert len(everything) == 8 and "platform-web.socket" in everything
    target = (ROOT / "platform/systemd/platform.target").read_text()
    assert "Wants=@WANTS@" in target
    for unit in (ROOT / "platform/systemd").glob("platform-*"):
        assert "Wants=platform-redis" not in unit.read_text(), unit.name


def test_platform_up_on_a_data_host_serves_redis_over_tls_on_its_address_only(tmp_path,
                                                                             measure):
    certs = make_certs(tmp_path / "certs", name="data", addresses=["127.0.0.2"])
    port = free_port_on("127.0.0.2")
    env = up_env(tmp_path, REDIS_PORT=str(port), PLATFORM_ROLES="data",
                 REDIS_BIND="127.0.0.2", REDIS_TLS_CERT=str(certs / "data.pem"),
                 REDIS_TLS_KEY=str(certs / "data.key"), REDIS_TLS_CA_FILE=str(certs / "ca.pem"))
    with platform_up(tmp_path, env, timeout=120) as (up, output):
        assert re.search(r"^redis\s+RUNNING", output(), re.MULTILINE)
        assert re.search(r"^web\s+STOPPED", output(), re.MULTILINE)
        password = dict(line.split("=", 1) for line in
                        (tmp_path / "var/dev.env").read_text().splitlines())["REDIS_PASSWORD"]
        tls = redis.Redis(host="127.0.0.2", port=port, password=password, ssl=True,
                          ssl_ca_certs=str(certs / "ca.pem"), socket_timeout=3)
        assert tls.ping()
        assert tls.config_get("bind") == {"bind": "127.0.0.2"}
        outcomes = {}
        for name, host, kwargs in (("plain text", "127.0.0.2", {}),
                                   ("127.0.0.1", "127.0.0.1", {"ssl": True, "ssl_ca_certs":
                                                               str(certs / "ca.pem")})):
            client = redis.Redis(host=host, port=port, password=password, socket_timeout=3,
                                 socket_connect_timeout=3, **kwargs)
            try:
                client.ping()
                outcomes[name] = "accepted"
            except redis.RedisError as exc:
                outcomes[name] = type(exc).__name__
        assert outcomes == {"plain text": "ConnectionError", "127.0.0.1": "ConnectionError"}
        env_file = (tmp_path / "var/platform.env").read_text()
        assert f"REDIS_URL=rediss://:{password}@127.0.0.2:{port}/0" in env_file
        os.killpg(up.pid, signal.SIGTERM)
        assert up.wait(timeout=120) == 0
    measure(refused=len(outcomes))


def test_install_of_a_host_without_data_refuses_before_writing_without_the_shared_values(
        tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "DJANGO_")) and k not in ("REDIS_URL", "DATABASE_URL")}
    result = subprocess.run(["bash", "platform/install", "--prefix", str(tmp_path / "root"),
                             "--roles", "web,workers"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "has no 'data': give DJANGO_SECRET_KEY, REDIS_URL and DATABASE_URL" in result.stderr
    assert not (tmp_path / "root").exists()


def test_a_data_only_host_bound_to_loopback_is_refused(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    env.update({"PLATFORM_VAR_DIR": str(tmp_path / "var"), "VENV": str(BIN.parent),
                "PLATFORM_ROLES": "data"})
    result = subprocess.run(["bash", "platform/up"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "REDIS_BIND=127.0.0.1 is loopback only" in result.stderr
    assert not (tmp_path / "var" / "supervisord.pid").exists()
