"""TLS between hosts: Redis on its TLS port only (plain port 0), PostgreSQL accepting TCP over
TLS only, certificates from the operator's recipe (platform/certs). An app host with
PLATFORM_REQUIRE_TLS runs its web, worker and beat over TLS, verifying the private CA and the
address; a client trusting another CA, or speaking plain text, is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psycopg
import pytest
import redis

from tests.documents.tally import all_finished, sample_text, tally
from tests.hosts.cluster import DataHost, app_host, make_certs, manage_on
from tests.hosts.conftest import FAST, HOST_B
from tests.procs import RedisServer, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.past_one_box]
DOCS = 3


def redis_outcome(**kwargs: object) -> str:
    client = redis.Redis(socket_timeout=3, socket_connect_timeout=3, **kwargs)  # type: ignore[arg-type]
    try:
        return "accepted" if client.ping() else "no"
    except redis.RedisError as exc:
        return "certificate" if "certificate verify failed" in str(exc) else type(exc).__name__
    finally:
        client.close()


def pg_outcome(data: DataHost, **kwargs: str) -> str:
    pg = data.postgres
    try:
        with psycopg.connect(host=data.address, port=pg.port, user=pg.user,
                             password=pg.password, dbname="postgres", connect_timeout=3,
                             **kwargs):
            return "accepted"
    except psycopg.OperationalError as exc:
        text = str(exc)
        if "certificate verify failed" in text:
            return "certificate"
        if "no encryption" in text:
            return "plain refused"
        return text


def test_the_platform_runs_over_tls_between_hosts(tmp_path, measure):
    certs = make_certs(tmp_path / "certs", name="data", addresses=["127.0.0.2"])
    other = make_certs(tmp_path / "other-ca", name="data", addresses=["127.0.0.2"])
    data = DataHost(tmp_path / "data", tls_dir=certs)
    host = app_host(data, tmp_path, name="hostT", address=HOST_B, **FAST)
    try:
        r = data.redis
        web = host.start_web(workers=1)
        worker = host.start_worker("worker1")
        host.start_beat("beat1")
        host.wait_worker(worker, r.client())
        host.wait_web(web)
        client = web.session()
        ids = [client.submit(sample_text(i)) for i in range(DOCS)]
        wait_until(lambda: all_finished(data, ids), timeout=60, interval=0.2,
                   what="documents processed over TLS")
        result = tally(data, ids)
        assert result.completed == DOCS and result.doubled == 0
        leader = wait_until(lambda: r.client().get("platform:beat::lock"), timeout=60,
                            what="the beat leads over TLS")

        # The plain port is closed; the TLS port speaks nothing but TLS.
        assert r.client().config_get("port") == {"port": "0"}
        outcomes = {
            "redis plain text": redis_outcome(host=data.address, port=r.port,
                                              password=r.password),
            "redis other CA": redis_outcome(host=data.address, port=r.port,
                                            password=r.password, ssl=True,
                                            ssl_ca_certs=str(other / "ca.pem")),
            "postgres plain text": pg_outcome(data, sslmode="disable"),
            "postgres other CA": pg_outcome(data, sslmode="verify-full",
                                            sslrootcert=str(other / "ca.pem")),
        }
        assert redis_outcome(host=data.address, port=r.port, password=r.password, ssl=True,
                             ssl_ca_certs=str(certs / "ca.pem")) == "accepted"
        assert pg_outcome(data, sslmode="verify-full",
                          sslrootcert=str(certs / "ca.pem")) == "accepted"
        assert outcomes["redis other CA"] == "certificate"
        assert outcomes["redis plain text"] in ("ConnectionError", "TimeoutError")
        assert outcomes == {**outcomes, "postgres plain text": "plain refused",
                            "postgres other CA": "certificate"}
        # A backup taken on the app host, which has no Redis files: Redis's data comes over
        # the network (TLS, verified) as an AOF directory a fresh Redis loads; the database
        # by pg_dump with the same TLS options.
        r.client().set("hosts-test:marker", "written before the backup")
        backup = Path(manage_on(host.base_dir, host.env, "backup_now").stdout.strip())
        manifest = json.loads((backup / "manifest.json").read_text())
        assert manifest["database"]["engine"] == "postgresql"
        assert manifest["database"]["bytes"] > 0
        restored = RedisServer(tmp_path / "restored", topology="single")
        restored.dir.rmdir()
        shutil.copytree(backup, restored.dir)
        restored.start()
        try:
            keys = restored.client().dbsize()
            assert restored.client().get("hosts-test:marker") == "written before the backup"
        finally:
            restored.stop()

        # The app host's own clients could only have used TLS: the plain port is 0, pg_hba
        # has hostssl lines only, and PLATFORM_REQUIRE_TLS made its settings demand
        # rediss:// and sslmode=verify-full (test_bind.py shows that refusal).
        measure(documents_over_tls=result.completed, beat_leader=leader.split(":")[0],
                refused=len(outcomes), outcomes=outcomes, backup_redis_keys=keys,
                backup_files=manifest["redis_files"])
    except BaseException:
        print(host.logs())
        raise
    finally:
        host.stop()
        data.stop()
