"""`PLATFORM_REDIS=sentinel bash platform/up` runs a primary, a replica and three sentinels,
every process reaching Redis through the sentinels; the platform survives losing the primary."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import redis
from redis.sentinel import Sentinel

from tests.platform.up_script import platform_up, program_states, supervisorctl, up_env
from tests.procs import ROOT, Client, free_port, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.past_one_box]
REDIS_PROGRAMS = ["redis", "redis-replica", "sentinel:sentinel1", "sentinel:sentinel2",
                  "sentinel:sentinel3"]


def test_platform_up_with_sentinel_fails_over_when_the_primary_is_killed(tmp_path, measure):
    sentinel_ports = [free_port() for _ in range(3)]
    replica_port = free_port()
    # 2 s down-after as in tests/sentinel.py (which says why not 1 s); production keeps 5 s.
    env = up_env(tmp_path, PLATFORM_REDIS="sentinel", REDIS_REPLICA_PORT=str(replica_port),
                 SENTINEL_PORTS=" ".join(map(str, sentinel_ports)),
                 SENTINEL_DOWN_AFTER_MS="2000", SENTINEL_FAILOVER_TIMEOUT_MS="10000",
                 DOCUMENTS_PROCESSING_SECONDS="0.1")
    with platform_up(tmp_path, env) as (up, output):
        text = output()
        states = program_states(text, REDIS_PROGRAMS + ["web", "worker:worker1"])
        assert set(states.values()) == {"RUNNING"}, states
        assert "Redis           sentinels 127.0.0.1:" in text
        platform_env = (tmp_path / "var/platform.env").read_text()
        assert "REDIS_URL=\n" in platform_env
        assert f"REDIS_SENTINELS=127.0.0.1:{sentinel_ports[0]}," in platform_env
        secrets = dict(line.split("=", 1) for line in
                       (tmp_path / "var/dev.env").read_text().splitlines())
        sentinel = Sentinel([("127.0.0.1", p) for p in sentinel_ports],
                            sentinel_kwargs={"password": secrets["REDIS_SENTINEL_PASSWORD"],
                                             "socket_timeout": 1})
        assert sentinel.discover_master("platform")[1] == int(env["REDIS_PORT"])
        # "running" promises a group that can fail over: each sentinel (not just one, as
        # Sentinel.discover_slaves asks) knows the replica and the two others. A sentinel that
        # knew no replica yet was once elected, aborted the failover and waited 20 s per try.
        assert group_settled(sentinel_ports, secrets["REDIS_SENTINEL_PASSWORD"])

        # `manage.py status` from a shell with none of the platform's variables but var/'s
        # place reaches the group through var/platform.env.
        bare = {k: v for k, v in os.environ.items()
                if not k.startswith(("PYTEST_", "DJANGO_", "REDIS_", "TEST_"))}
        status = subprocess.run([sys.executable, "manage.py", "status"], cwd=ROOT, timeout=90,
                                env={**bare, "PLATFORM_VAR_DIR": env["PLATFORM_VAR_DIR"]},
                                capture_output=True, text=True)
        assert status.returncode == 0, status.stdout + status.stderr
        assert re.search(r"^  url\s+sentinel platform@127\.0\.0\.1:", status.stdout, re.MULTILINE)
        assert "alive: 2" in status.stdout

        client = Client.login(f"http://127.0.0.1:{env['WEB_PORT']}", "dev",
                              secrets["DEV_USER_PASSWORD"])
        first = client.submit("before the failover")
        wait_done(client, first)

        # The primary's host is lost: its process killed and not restarted (supervisord
        # would bring it back within a second, before any sentinel calls it down).
        pid = int(supervisorctl(env, "pid", "redis").strip())
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        supervisorctl(env, "stop", "redis")
        try:
            wait_until(lambda: sentinel.discover_master("platform")[1] == replica_port,
                       timeout=60, what="the replica promoted", interval=0.1)
        except TimeoutError:
            # What each sentinel decided (votes, aborts, its replica's state), for a run that
            # failed once in CI and not since.
            for log in sorted((tmp_path / "var" / "log").glob("sentinel*.log")):
                print(f"----- {log.name} -----\n{log.read_text()[-6000:]}")
            raise
        promoted_s = time.monotonic() - killed_at

        second = wait_until(lambda: submitted(client, "after the failover"), timeout=60,
                            what="a submission accepted after the failover")
        wait_done(client, second)
        resumed_s = time.monotonic() - killed_at
        assert program_states(supervisorctl(env, "status"), REDIS_PROGRAMS[1:]) == {
            name: "RUNNING" for name in REDIS_PROGRAMS[1:]}
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=120) == 0

    # Started again, the group keeps the promoted node as primary (the sentinels recorded it):
    # the old primary comes back as its replica, and nothing written since the failover goes.
    with platform_up(tmp_path, env, log_name="up-again.log"):
        assert sentinel.discover_master("platform")[1] == replica_port
        wait_until(lambda: len(sentinel.discover_slaves("platform")) == 1, timeout=30,
                   what="the old primary back as a replica")
        client = Client.login(f"http://127.0.0.1:{env['WEB_PORT']}", "dev",
                              secrets["DEV_USER_PASSWORD"])
        wait_done(client, client.submit("after the restart"))
    measure(promoted_s=round(promoted_s, 1), second_done_s=round(resumed_s, 1))


def group_settled(ports: list[int], password: str) -> bool:
    """Every sentinel knows one replica and the two other sentinels."""
    for port in ports:
        with redis.Redis(port=port, password=password, socket_timeout=5,
                         decode_responses=True) as node:
            master = node.sentinel_master("platform")
        if int(master["num-slaves"]) < 1 or int(master["num-other-sentinels"]) < 2:
            return False
    return True


def submitted(client: Client, text: str) -> int | None:
    """The new document's id on 202; None on 503 (Redis not reachable yet), else a failure."""
    response = client.post("/api/documents/", json={"title": "", "text": text})
    if response.status_code == 503:
        return None
    assert response.status_code == 202, response.text
    return int(response.json()["id"])


def wait_done(client: Client, document_id: int) -> None:
    wait_until(lambda: client.get(f"/api/documents/{document_id}/").json()["state"] == "done",
               timeout=60, what=f"document {document_id} done")
