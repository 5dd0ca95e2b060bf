"""TLS to Redis: every client of the platform verifies the server against REDIS_TLS_CA_FILE.

A real redis-server listening on TLS only (and a sentinel, TLS only), a CA and a server
certificate made with openssl; a child process with the platform's settings opens each client
(sync, the beat's, the hub's two, kombu's broker and the beat's fenced broker connection,
plain RedBeat) and PINGs. A client given another CA is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.procs import ROOT, free_port, spawn, wait_until

pytestmark = pytest.mark.processes

CLIENTS = """
import asyncio, django; django.setup()
from django.conf import settings
from celery_conf import app
from celery_conf.connections import (RedisTarget, async_log_client, async_subscriber,
                                     beat_client, redis_client, sync_client)
from redbeat.schedulers import get_redis
from scheduler.redbeat import _expose_redbeat_settings
from scheduler.settings import broker_transport_options

target = settings.REDIS
assert redis_client().ping() and beat_client(target).ping()
async def hub():
    async with async_subscriber(target) as client:
        assert await client.ping()
    client = async_log_client(target)
    assert await client.ping()
    await client.aclose()
asyncio.run(hub())
with app.connection_for_write() as conn:
    conn.ensure_connection(max_retries=1)
    assert conn.connected
beat_options = {**app.conf.broker_transport_options, **broker_transport_options()}
with app.connection_for_write(transport_options=beat_options) as conn:
    conn.ensure_connection(max_retries=1)
    assert conn.connected
_expose_redbeat_settings(app)
assert get_redis(app).ping()
other = RedisTarget(**{**target.__dict__, "ca_file": "/etc/ssl/certs/ca-certificates.crt"})
try:
    sync_client(other).ping()
except Exception as exc:
    print("other CA refused:", type(exc).__name__)
print("every client over TLS")
"""


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, Path]:
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=tmp_path, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=platform-test-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=127.0.0.1")
    (tmp_path / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")
    return {name: tmp_path / f"{name}.pem" for name in ("ca", "server")} | {
        "key": tmp_path / "server.key"}


def tls_conf(files: dict[str, Path], port: int) -> str:
    return (f"port 0\ntls-port {port}\ntls-cert-file {files['server']}\n"
            f"tls-key-file {files['key']}\ntls-ca-cert-file {files['ca']}\n"
            "tls-auth-clients no\ntls-replication yes\n")


def run_clients(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    return subprocess.run(
        [sys.executable, "-c", CLIENTS], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**base, "DJANGO_SETTINGS_MODULE": "config.settings.development",
             "PLATFORM_VAR_DIR": str(tmp_path), **env})


def start(tmp_path: Path, name: str, conf: str, *extra: str):  # type: ignore[no-untyped-def]
    path = tmp_path / f"{name}.conf"
    path.write_text(conf)
    return spawn(name, ["redis-server", str(path), *extra], env=dict(os.environ),
                 log_dir=tmp_path / "log")


def test_every_client_speaks_tls_to_a_single_redis(tmp_path, tls_files):
    port = free_port()
    proc = start(tmp_path, "redis", tls_conf(tls_files, port)
                 + f"requirepass tls-pass\ndir {tmp_path}\n")
    try:
        wait_until(lambda: "Ready to accept" in proc.log(), timeout=20, what="redis up")
        result = run_clients(tmp_path, REDIS_URL=f"rediss://:tls-pass@127.0.0.1:{port}/0",
                             REDIS_TLS_CA_FILE=str(tls_files["ca"]))
    finally:
        proc.stop()
    assert result.returncode == 0, result.stderr[-3000:]
    assert "other CA refused" in result.stdout and "every client over TLS" in result.stdout


def test_every_client_speaks_tls_to_sentinel_and_the_primary(tmp_path, tls_files):
    port, sentinel_port = free_port(), free_port()
    procs = [start(tmp_path, "redis", tls_conf(tls_files, port)
                   + f"requirepass data-pass\nmasterauth data-pass\ndir {tmp_path}\n")]
    try:
        wait_until(lambda: "Ready to accept" in procs[0].log(), timeout=20, what="redis up")
        procs.append(start(tmp_path, "sentinel", tls_conf(tls_files, sentinel_port)
                           + f"requirepass sentinel-pass\ndir {tmp_path}\n"
                           f"sentinel monitor platform 127.0.0.1 {port} 1\n"
                           "sentinel auth-pass platform data-pass\n", "--sentinel"))
        wait_until(lambda: "+monitor master platform" in procs[1].log(), timeout=20,
                   what="sentinel monitors the primary")
        result = run_clients(tmp_path, REDIS_SENTINELS=f"127.0.0.1:{sentinel_port}",
                             REDIS_PASSWORD="data-pass", REDIS_SENTINEL_PASSWORD="sentinel-pass",
                             REDIS_TLS="true", REDIS_TLS_CA_FILE=str(tls_files["ca"]))
    finally:
        for proc in procs:
            proc.stop()
    assert result.returncode == 0, result.stderr[-3000:]
    assert "other CA refused" in result.stdout and "every client over TLS" in result.stdout
