"""The data services listen only where they are told, and only to who knows the password; an
app host refuses to start when its addresses can only be a mistake (config/hosts.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import redis

from tests.hosts.cluster import DataHost
from tests.procs import ROOT, child_env

pytestmark = [pytest.mark.processes, pytest.mark.past_one_box]

# Addresses the data host (127.0.0.2) was not told: the machine's usual loopback, an app host's.
NOT_TOLD = ["127.0.0.1", "127.0.0.3"]


def redis_refused(host: str, port: int, password: str | None) -> str:
    client = redis.Redis(host=host, port=port, password=password, socket_timeout=3,
                         socket_connect_timeout=3)
    try:
        client.ping()
    except (redis.ConnectionError, redis.ResponseError) as exc:
        # redis-py 8 opens with HELLO: a missing or wrong password fails that handshake.
        text = str(exc).lower()
        if "refused" in text:
            return "refused"
        if any(w in text for w in ("noauth", "authenticated", "username-password", "auth")):
            return "auth"
        return text
    finally:
        client.close()
    return "accepted"


def pg_refused(host: str, port: int, password: str | None) -> str:
    try:
        with psycopg.connect(host=host, port=port, user="platform", password=password or "",
                             dbname="postgres", connect_timeout=3):
            return "accepted"
    except psycopg.OperationalError as exc:
        text = str(exc).lower()
        if "refused" in text:
            return "refused"
        if "password" in text or "authentication" in text:
            return "auth"
        return text


def test_redis_and_postgres_refuse_other_addresses_and_missing_passwords(tmp_path, measure):
    data = DataHost(tmp_path / "data", migrate=False)
    try:
        r, pg = data.redis, data.postgres
        outcomes = {}
        for host in NOT_TOLD:
            outcomes[f"redis {host}"] = redis_refused(host, r.port, r.password)
            outcomes[f"postgres {host}"] = pg_refused(host, pg.port, pg.password)
        outcomes["redis no password"] = redis_refused(data.address, r.port, None)
        outcomes["redis wrong password"] = redis_refused(data.address, r.port, "wrong-password")
        outcomes["postgres no password"] = pg_refused(data.address, pg.port, None)
        outcomes["postgres wrong password"] = pg_refused(data.address, pg.port, "wrong")
        # The right address and password work: the refusals above are not a dead server.
        assert redis_refused(data.address, r.port, r.password) == "accepted"
        assert pg_refused(data.address, pg.port, pg.password) == "accepted"
        expected = {k: ("refused" if any(h in k for h in NOT_TOLD) else "auth")
                    for k in outcomes}
        assert outcomes == expected
        # Redis's own view: bound to the one address, protected mode on.
        config = r.client().config_get("bind") | r.client().config_get("protected-mode")
        assert config == {"bind": data.address, "protected-mode": "yes"}
        measure(refused_by_address=sum(v == "refused" for v in outcomes.values()),
                refused_by_password=sum(v == "auth" for v in outcomes.values()),
                attempts=len(outcomes))
    finally:
        data.stop()


def check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = child_env(tmp_path, database=tmp_path / "db.sqlite3",
                     redis_url="redis://:a-long-enough-password@127.0.0.1:6390/0")
    return subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT,
                          env={**base, **env}, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("env", "refusal"), [
    # What an operator gets wrong on a host without the data role:
    ({}, "REDIS_URL must name the data host's address, not 127.0.0.1"),
    ({"REDIS_URL": "redis://:a-long-enough-password@localhost:6390/0",
      "DATABASE_URL": "postgres://platform:pw@10.0.0.2/platform"}, "not localhost"),
    ({"REDIS_URL": "redis://:a-long-enough-password@10.0.0.2:6390/0"},
     "a SQLite file cannot be shared between hosts"),
    ({"REDIS_URL": "redis://:a-long-enough-password@10.0.0.2:6390/0",
      "DATABASE_URL": "postgres://platform:pw@127.0.0.1/platform"},
     "DATABASE_URL must name the data host's address"),
    ({"REDIS_SENTINELS": "10.0.0.2:26379,127.0.0.1:26379",
      "DATABASE_URL": "postgres://platform:pw@10.0.0.2/platform"},
     "REDIS_SENTINELS must name the data host's address"),
    ({"PLATFORM_ROLES": "web,wrokers"}, "unknown role(s) wrokers"),
    ({"PLATFORM_REQUIRE_TLS": "true", "REDIS_URL": "redis://:a-long-enough-password@10.0.0.2:6390/0",
      "DATABASE_URL": "postgres://platform:pw@10.0.0.2/platform"}, "reached without TLS"),
    ({"PLATFORM_REQUIRE_TLS": "true",
      "REDIS_URL": "rediss://:a-long-enough-password@10.0.0.2:6390/0",
      "DATABASE_URL": "postgres://platform:pw@10.0.0.2/platform"}, "sslmode=verify-full"),
])
def test_an_app_host_refuses_addresses_that_can_only_be_a_mistake(tmp_path, env, refusal):
    result = check(tmp_path, PLATFORM_ROLES=env.pop("PLATFORM_ROLES", "web,workers,beat"),
                   **env)
    assert result.returncode != 0 and refusal in result.stderr, result.stderr[-2000:]


def test_the_same_addresses_start_on_a_host_with_the_data_role_or_remote_ones(tmp_path):
    assert check(tmp_path).returncode == 0  # one box: every role, loopback, SQLite
    remote = check(tmp_path, PLATFORM_ROLES="web,workers",
                   REDIS_URL="redis://:a-long-enough-password@10.0.0.2:6390/0",
                   DATABASE_URL="postgres://platform:pw@10.0.0.2/platform")
    assert remote.returncode == 0, remote.stderr[-2000:]
