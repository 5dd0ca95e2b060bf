"""Production Sentinel on three hosts, from the installer's own writers: the data host's Redis
and sentinel, a second data host's Redis as a replica (REDIS_REPLICA_OF) with its sentinel, and
the third sentinel on an app host (the `sentinel` role). Losing the primary's whole host (its
Redis and its sentinel) still leaves two of three sentinels: the replica is promoted."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis
from redis.sentinel import Sentinel

from tests.hosts.cluster import free_port_on, new_password
from tests.hosts.test_up_roles import role_units
from tests.procs import ROOT, Proc, spawn, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.past_one_box]
PRIMARY, REPLICA, APP = "127.0.0.2", "127.0.0.3", "127.0.0.4"


def test_the_roles_start_a_sentinel_on_each_data_host_and_on_the_app_host_named():
    assert "platform-sentinel.service" not in role_units("web,workers,beat,flower,data")
    assert "platform-sentinel.service" in role_units("data REDIS_SENTINELS=a:1,b:2,c:3")
    assert "platform-sentinel.service" in role_units("data REDIS_REPLICA_OF='10.0.0.2 6390'")
    assert role_units("web,sentinel") == ["platform-web.socket", "platform-web.service",
                                          "platform-sentinel.service"]
    unit = (ROOT / "platform/systemd/platform-sentinel.service").read_text()
    # Sentinel rewrites its file: it must live where the service may write, not in /etc.
    assert "ExecStart=/usr/bin/redis-server @DATA_DIR@/sentinel/sentinel.conf --sentinel" in unit


def installed_conf(prefix: Path, env: dict[str, str], function: str, target: Path) -> str:
    """Run platform/release.sh's writer as platform/install does, with this host's values."""
    (prefix / "opt/platform").mkdir(parents=True, exist_ok=True)
    current = prefix / "opt/platform/current"
    if not current.exists():
        current.symlink_to(ROOT)  # the release's platform/redis.conf and sentinel.conf
    script = (f'. platform/lib.sh; . platform/release.sh; release_layout "{prefix}"; '
              f'{function} "{target}"')
    result = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True,
                            timeout=30, env={**os.environ, "PLATFORM_USER": "root", **env})
    assert result.returncode == 0, result.stderr
    return target.read_text()


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_three_hosts_run_sentinel_from_the_installed_files_and_survive_the_primary_host(
        tmp_path, measure, tls):
    """With ``tls`` as between hosts by default (REDIS_TLS=true): each host's Redis and
    sentinel on TLS only with that host's certificate (platform/certs), replication and the
    sentinels' own links over TLS, every client verifying the private CA."""
    password, sentinel_password = new_password(), new_password()
    ports = {host: free_port_on(host) for host in (PRIMARY, REPLICA)}
    sentinel_ports = {host: free_port_on(host) for host in (PRIMARY, REPLICA, APP)}
    shared = {"REDIS_PASSWORD": password, "REDIS_SENTINEL_PASSWORD": sentinel_password,
              "REDIS_SENTINELS": ",".join(f"{h}:{p}" for h, p in sentinel_ports.items())}
    ssl: dict[str, object] = {}
    certs = tmp_path / "certs"
    if tls:
        subprocess.run([str(ROOT / "platform/certs"), "ca", str(certs)], check=True,
                       capture_output=True, timeout=60)
        shared.update({"REDIS_TLS": "true", "REDIS_TLS_CA_FILE": str(certs / "ca.pem")})
        ssl = {"ssl": True, "ssl_ca_certs": str(certs / "ca.pem"), "ssl_cert_reqs": "required"}
    hosts = {
        PRIMARY: {"PLATFORM_ROLES": "data", "REDIS_BIND": PRIMARY,
                  "REDIS_PORT": str(ports[PRIMARY])},
        REPLICA: {"PLATFORM_ROLES": "data", "REDIS_BIND": REPLICA,
                  "REDIS_PORT": str(ports[REPLICA]),
                  "REDIS_REPLICA_OF": f"{PRIMARY} {ports[PRIMARY]}"},
        APP: {"PLATFORM_ROLES": "web,workers,sentinel", "REDIS_BIND": APP,
              "REDIS_SENTINEL_PRIMARY": f"{PRIMARY} {ports[PRIMARY]}"},
    }
    procs: dict[str, Proc] = {}
    try:
        for host, values in hosts.items():
            prefix = tmp_path / host
            env = {**shared, **values, "SENTINEL_PORT": str(sentinel_ports[host])}
            if tls:  # this host's own certificate, for its address
                subprocess.run([str(ROOT / "platform/certs"), "server", str(certs), host, host],
                               check=True, capture_output=True, timeout=60)
                env.update({"REDIS_TLS_CERT": str(certs / f"{host}.pem"),
                            "REDIS_TLS_KEY": str(certs / f"{host}.key")})
            if host != APP:
                (prefix / "var/lib/platform/redis").mkdir(parents=True)
                conf = installed_conf(prefix, env, "write_redis_conf_for",
                                      prefix / "redis.conf")
                assert f'masterauth "{password}"' in conf  # one quoted argument
                assert ("replicaof" in conf) == (host == REPLICA)
                procs[f"redis@{host}"] = spawn(f"redis-{host}", ["redis-server", str(
                    prefix / "redis.conf")], env=dict(os.environ), log_dir=tmp_path / "log")
            sentinel_conf = prefix / "var/lib/platform/sentinel/sentinel.conf"
            text = installed_conf(prefix, env, "write_sentinel_conf_for", sentinel_conf)
            assert f"sentinel monitor platform {PRIMARY} {ports[PRIMARY]} 2" in text
            assert (f"tls-port {sentinel_ports[host]}" in text) == tls
            procs[f"sentinel@{host}"] = spawn(
                f"sentinel-{host}", ["redis-server", str(sentinel_conf), "--sentinel"],
                env=dict(os.environ), log_dir=tmp_path / "log")

        sentinel = Sentinel(list(sentinel_ports.items()), sentinel_kwargs={
            "password": sentinel_password, "socket_timeout": 1, "socket_connect_timeout": 1,
            **ssl}, **ssl)

        def settled() -> bool:
            for host, port in sentinel_ports.items():
                master = redis.Redis(host=host, port=port, password=sentinel_password,
                                     socket_timeout=1, decode_responses=True, **ssl
                                     ).sentinel_master("platform")
                if int(master["num-other-sentinels"]) < 2 or int(master["num-slaves"]) < 1:
                    return False
            return True

        wait_until(settled, timeout=60, what="three sentinels know each other and the replica")
        primary = sentinel.master_for("platform", password=password, socket_timeout=2)
        primary.set("before", "1")
        wait_until(lambda: redis.Redis(host=REPLICA, port=ports[REPLICA], password=password,
                                       socket_timeout=2, **ssl).get("before") == b"1",
                   timeout=30, what="the replica has the primary's write")

        # The primary's whole host is lost: its Redis and its sentinel.
        lost_at = time.monotonic()
        procs[f"redis@{PRIMARY}"].signal(signal.SIGKILL)
        procs[f"sentinel@{PRIMARY}"].signal(signal.SIGKILL)
        wait_until(lambda: sentinel.discover_master("platform") == (REPLICA, ports[REPLICA]),
                   timeout=60, what="the two remaining sentinels promote the replica",
                   interval=0.1)
        promoted_s = time.monotonic() - lost_at
        new_primary = sentinel.master_for("platform", password=password, socket_timeout=2)
        wait_until(lambda: new_primary.set("after", "1"), timeout=30,
                   what="writes accepted by the promoted replica")
        assert new_primary.get("before") == b"1"
        if tls:  # nothing answers in plain text: TLS only, on every port
            for port in [*ports.values(), *sentinel_ports.values()]:
                host = next(h for h, p in [*ports.items(), *sentinel_ports.items()] if p == port)
                if procs.get(f"redis@{host}", procs[f"sentinel@{host}"]).alive():
                    with pytest.raises(redis.ConnectionError):
                        redis.Redis(host=host, port=port, password=password,
                                    socket_timeout=2).ping()
        measure(tls=tls, promoted_s=round(promoted_s, 1))
    finally:
        for proc in procs.values():
            if proc.alive():
                proc.stop()


def test_a_sentinel_speaking_tls_without_this_hosts_certificate_is_refused(tmp_path):
    env = {"PLATFORM_ROLES": "web,sentinel", "REDIS_PASSWORD": new_password(),
           "REDIS_SENTINEL_PASSWORD": new_password(), "REDIS_TLS": "true",
           "REDIS_SENTINEL_PRIMARY": f"{PRIMARY} 6390"}
    (tmp_path / "opt/platform").mkdir(parents=True)
    (tmp_path / "opt/platform/current").symlink_to(ROOT)
    target = tmp_path / "var/lib/platform/sentinel/sentinel.conf"
    script = (f'. platform/lib.sh; . platform/release.sh; release_layout "{tmp_path}"; '
              f'write_sentinel_conf_for "{target}"')
    result = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True,
                            timeout=30, env={**os.environ, "PLATFORM_USER": "root", **env})
    assert result.returncode != 0
    assert "needs this host's certificate, REDIS_TLS_CERT and REDIS_TLS_KEY" in result.stderr
    assert not target.exists()  # nothing half-written for Sentinel to own
