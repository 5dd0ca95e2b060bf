"""`platform/up`, the development start-up, on a host in a network namespace of its own with
some roles, over TLS to the data host: the same start-up code as a real host's, cut from the
data host and healed. Its heartbeats stop with the cut and come back after the heal; its
beat's lease ends with the cut (it exits, supervisord starts it again) and a beat of it leads
again after the heal; supervisord keeps every program of its roles running throughout."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.hosts.cluster import running
from tests.partitions.conftest import start_apart
from tests.partitions.test_beat_cut import host_of, leader
from tests.platform.up_script import platform_up, program_states, supervisorctl, up_env
from tests.procs import wait_until

pytestmark = [pytest.mark.processes, pytest.mark.partitions]

PROGRAMS = ["worker:worker1", "worker:worker2", "beat:beat1", "beat:beat2"]
HEARTBEATS = {"platform:worker:worker1@hostB", "platform:worker:worker2@hostB"}
PASSED_ON = ("REDIS_URL", "DATABASE_URL", "REDIS_TLS_CA_FILE", "PLATFORM_REQUIRE_TLS",
             "DJANGO_ALLOWED_HOSTS")


def test_platform_up_on_a_host_apart_runs_its_roles_over_tls_and_rides_out_a_cut(
        tmp_path, measure) -> None:
    apart = start_apart(tmp_path / "apart")
    with running(apart):
        b = apart.net.hosts["hostB"]
        host_env = apart.hosts["hostB"].env
        env = up_env(tmp_path, PLATFORM_ROLES="workers,beat", PLATFORM_HOST_NAME="hostB",
                     **{name: host_env[name] for name in PASSED_ON if name in host_env})
        client = apart.data.redis.client()
        with platform_up(tmp_path, env, netns=b.netns) as (up, output):
            assert env["REDIS_URL"].startswith("rediss://")
            wait_until(lambda: set(client.scan_iter("platform:worker:*@hostB")) == HEARTBEATS,
                       timeout=90, what="hostB's workers heartbeat to the data host")
            wait_until(lambda: (t := leader(apart)) is not None and host_of(t) == "hostB",
                       timeout=60, what="a beat of hostB leads")
            apart.net.cut("hostB")
            cut_at = time.monotonic()
            wait_until(lambda: not set(client.scan_iter("platform:worker:*@hostB"))
                       and leader(apart) is None, timeout=60, interval=0.2,
                       what="hostB's heartbeats and lock expire")
            gone_s = time.monotonic() - cut_at
            apart.net.heal("hostB")
            healed_at = time.monotonic()
            wait_until(lambda: set(client.scan_iter("platform:worker:*@hostB")) == HEARTBEATS
                       and leader(apart) is not None, timeout=90, interval=0.2,
                       what="hostB heartbeats and leads again")
            back_s = time.monotonic() - healed_at
            # Every program of its roles running (a beat that lost its lease was restarted).
            wait_until(lambda: set(program_states(supervisorctl(env, "status"), PROGRAMS)
                                   .values()) == {"RUNNING"}, timeout=30,
                       what="supervisord runs every program of hostB's roles")
            os.killpg(up.pid, signal.SIGTERM)
            assert up.wait(timeout=120) == 0, output()[-3000:]
        measure(heartbeats_and_lock_gone_after_cut_s=round(gone_s, 1),
                back_after_heal_s=round(back_s, 1))

