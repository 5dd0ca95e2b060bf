"""Production hardening: deploy checks, weak secrets refused, request limits enforced in front
of Django (nothing big written anywhere), oversized bodies answered with a JSON 413."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys

import psutil
import pytest

from tests.procs import ROOT, wait_until

# The web command line's limits, as platform/systemd/platform-web.service runs it.
UVICORN_LIMITS = ("--http", "h11", "--h11-max-incomplete-event-size", "65536")
FIFTY_MB = 50 * 1024 * 1024


def production_env(tmp_path, **overrides: str) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "config.settings.production",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(48),
        "DJANGO_ALLOWED_HOSTS": "box.example",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "REDIS_URL": f"redis://:{secrets.token_urlsafe(24)}@127.0.0.1:6390/0",
        "PLATFORM_VAR_DIR": str(tmp_path),
    }
    env.update(overrides)
    return {k: v for k, v in env.items() if v is not None}


def check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", "check", "--deploy"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_check_deploy_reports_nothing_under_production_settings(tmp_path):
    result = check_deploy(production_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout
    assert "WARNING" not in result.stdout + result.stderr


@pytest.mark.parametrize(("overrides", "message"), [
    ({"DJANGO_SECRET_KEY": None}, "DJANGO_SECRET_KEY is not set"),
    ({"DJANGO_SECRET_KEY": "x" * 60}, "DJANGO_SECRET_KEY is too weak"),
    ({"DJANGO_SECRET_KEY": "development-only-not-secret"}, "DJANGO_SECRET_KEY is too weak"),
    ({"REDIS_URL": None}, "REDIS_URL is not set"),
    ({"REDIS_URL": "redis://127.0.0.1:6390/0"}, "REDIS_URL must carry a Redis password"),
    ({"REDIS_URL": "redis://:short@127.0.0.1:6390/0"}, "REDIS_URL must carry a Redis password"),
    ({"DATABASE_URL": None}, "DATABASE_URL is not set"),
    ({"DJANGO_ALLOWED_HOSTS": None}, "DJANGO_ALLOWED_HOSTS is not set"),
])
def test_production_refuses_weak_or_missing_settings(tmp_path, overrides, message):
    result = check_deploy(production_env(tmp_path, **overrides))
    assert result.returncode != 0
    assert message in result.stderr


# An app host (no data role) as the README sets one up: the data host's addresses.
APP_HOST = {"PLATFORM_ROLES": "web,workers,beat,flower",
            "DATABASE_URL": "postgres://platform:pw@10.0.0.2:5433/platform"}
VERIFIED_PG = "?sslmode=verify-full&sslrootcert=/etc/platform/ca.pem"


@pytest.mark.parametrize(("overrides", "message"), [
    # Plain text between hosts is refused by default on a host without the data role.
    ({"REDIS_URL": "redis://:{pw}@10.0.0.2:6390/0"},
     "PLATFORM_REQUIRE_TLS is on but Redis is reached without TLS"),
    ({"REDIS_URL": "rediss://:{pw}@10.0.0.2:6390/0"},
     "PLATFORM_REQUIRE_TLS is on but DATABASE_URL lacks"),
    # Encrypted but unverified (anyone answering on the address) is not enough either.
    ({"REDIS_URL": "rediss://:{pw}@10.0.0.2:6390/0",
      "DATABASE_URL": APP_HOST["DATABASE_URL"] + "?sslmode=require"},
     "PLATFORM_REQUIRE_TLS is on but DATABASE_URL lacks"),
    # Verified TLS both ways passes; so does verify-ca, and an operator's explicit "false".
    ({"REDIS_URL": "rediss://:{pw}@10.0.0.2:6390/0",
      "DATABASE_URL": APP_HOST["DATABASE_URL"] + VERIFIED_PG}, None),
    ({"REDIS_URL": "rediss://:{pw}@10.0.0.2:6390/0",
      "DATABASE_URL": APP_HOST["DATABASE_URL"] + "?sslmode=verify-ca&sslrootcert=/ca.pem"}, None),
    ({"REDIS_URL": "redis://:{pw}@10.0.0.2:6390/0", "PLATFORM_REQUIRE_TLS": "false"}, None),
])
def test_production_requires_tls_on_a_host_without_the_data_role(tmp_path, overrides,
                                                                    message):
    password = secrets.token_urlsafe(24)
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")  # must exist (settings)
    env = production_env(tmp_path, **{**APP_HOST, "REDIS_TLS_CA_FILE": str(tmp_path / "ca.pem"),
                                      **{k: v.format(pw=password) for k, v in overrides.items()}})
    result = check_deploy(env)
    if message is None:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode != 0 and message in result.stderr, result.stderr


def test_a_one_box_production_install_keeps_loopback_plain_text(tmp_path):
    """All roles (the default): Redis and the database on loopback without TLS, as before."""
    env = production_env(tmp_path)
    assert "PLATFORM_ROLES" not in env and env["REDIS_URL"].startswith("redis://")
    assert check_deploy(env).returncode == 0


def written(proc: psutil.Process) -> int:
    """Bytes the web server's processes passed to write() (files, pipes and sockets alike)."""
    tree = [proc, *proc.children(recursive=True)]
    return sum(p.io_counters().write_chars for p in tree)


def send_raw(port: int, head: bytes, body_chunks, limit: int) -> tuple[bytes, int]:
    """Send a request piece by piece until the server answers or closes; (answer, bytes sent)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sent = 0
    try:
        sock.sendall(head)
        sent += len(head)
        for chunk in body_chunks:
            if sent >= limit:
                break
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass  # the server closed the connection under us: the refusal
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except OSError:
        pass
    sock.close()
    return answer, sent


@pytest.mark.processes
def test_oversized_requests_are_refused_in_front_of_django(make_stack, measure):
    stack = make_stack(env={"DJANGO_DEBUG": "true"})  # even with DEBUG, never a debug page
    web = stack.start_web(workers=1, uvicorn_args=UVICORN_LIMITS)
    port = int(web.base.rsplit(":", 1)[1])
    server = psutil.Process(web.proc.pid)
    limit = int(stack.manage("shell", "--no-imports", "-c",
                             "from django.conf import settings; "
                             "print(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)").stdout.split()[-1])
    megabyte = b"a" * (1024 * 1024)

    # Anonymous 50 MB, declared: refused before a byte of the body is read.
    before = written(server)
    answer, sent = send_raw(port, (b"POST /api/documents/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                   b"Content-Type: application/json\r\n"
                                   b"Content-Length: %d\r\n\r\n" % FIFTY_MB),
                            iter(lambda: megabyte, None), FIFTY_MB)
    declared_written = written(server) - before
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"error": "The request body is larger than the limit' in answer

    # Anonymous 50 MB, chunked (no length given): cut off as soon as it passes the limit.
    def chunks():
        while True:
            yield b"%x\r\n%s\r\n" % (len(megabyte), megabyte)

    before = written(server)
    answer, sent_chunked = send_raw(port, (b"POST /api/documents/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                           b"Content-Type: application/json\r\n"
                                           b"Transfer-Encoding: chunked\r\n\r\n"),
                                    chunks(), FIFTY_MB)
    chunked_written = written(server) - before
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"The request body is larger than the limit" in answer

    # A 50 MB header: refused by the HTTP parser, never buffered whole.
    rss_before = server.memory_info().rss + sum(c.memory_info().rss for c in server.children())
    before = written(server)
    answer, sent_header = send_raw(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ",
                                   iter(lambda: megabyte, None), FIFTY_MB)
    header_written = written(server) - before
    assert answer.startswith(b"HTTP/1.1 400") or answer == b"", answer[:200]
    rss_after = server.memory_info().rss + sum(c.memory_info().rss for c in server.children())

    for name, amount in (("declared", declared_written), ("chunked", chunked_written),
                         ("header", header_written)):
        assert amount < 4 * 1024 * 1024, f"{name}: the server wrote {amount} bytes"
    assert rss_after - rss_before < 16 * 1024 * 1024

    # Past DATA_UPLOAD_MAX_MEMORY_SIZE from a logged-in user: the same JSON 413, no debug page,
    # nothing saved; the server keeps answering.
    client = web.session()
    count = stack.query("SELECT count(*) FROM documents_document")[0][0]
    response = client.http.post(web.base + "/api/documents/", data=b"x" * (limit + 1),
                                headers={**client.headers(), "Content-Type": "application/json"},
                                timeout=30)
    assert response.status_code == 413
    assert response.headers["Content-Type"] == "application/json"
    assert "larger than the limit" in response.json()["error"]
    page = client.http.post(web.base + "/documents/", data=b"x" * (limit + 1), timeout=30,
                            headers={**client.headers(), "Accept": "text/html",
                                     "Content-Type": "application/x-www-form-urlencoded"})
    assert page.status_code == 413 and "text/html" in page.headers["Content-Type"]
    assert "larger than the limit" in page.text and "Traceback" not in page.text
    assert stack.query("SELECT count(*) FROM documents_document")[0][0] == count
    wait_until(lambda: client.get("/healthz").ok, timeout=10, what="server still answers")
    measure(body_declared_server_wrote_kb=declared_written // 1024,
            body_chunked_server_wrote_kb=chunked_written // 1024,
            body_chunked_client_sent_mb=round(sent_chunked / 2**20, 1),
            header_server_wrote_kb=header_written // 1024,
            header_client_sent_mb=round(sent_header / 2**20, 1))
