"""/healthz and /readyz against real processes: no login, no secrets, each failing check named,
and ready again by itself when the cause is gone."""

from __future__ import annotations

import statistics

import pytest
import requests

from tests.procs import wait_until

pytestmark = pytest.mark.processes


def readyz(base: str) -> tuple[int, dict]:
    response = requests.get(base + "/readyz", timeout=10)
    assert response.headers["Content-Type"] == "application/json"
    return response.status_code, response.json()


def test_healthz_and_readyz_follow_the_platform(make_stack, measure):
    stack = make_stack(env={"READYZ_MAX_QUEUE_AGE_S": "2", "DOCUMENTS_PROCESSING_SECONDS": "0.2"})
    web = stack.start_web(workers=1)

    health = requests.get(web.base + "/healthz", timeout=10)
    assert health.status_code == 200 and health.json() == {"status": "ok"}

    # No worker and no beat yet: not ready, and it says why.
    status, report = readyz(web.base)
    assert status == 503 and report["ready"] is False
    assert report["checks"]["database"]["ok"] and report["checks"]["redis"]["ok"]
    assert report["checks"]["workers"] == {"ok": False, "alive": 0}
    assert report["checks"]["beat"]["ok"] is False

    # Work waiting with nobody to take it: the queue's age passes its bound.
    client = web.session()
    ids = [client.submit(f"waiting {i}") for i in range(3)]
    wait_until(lambda: not readyz(web.base)[1]["checks"]["queue_age"]["ok"], timeout=30,
               what="queue age over its 2 s bound")

    stack.start_worker("w1")
    stack.start_elected_beat("beat1")
    wait_until(lambda: readyz(web.base)[0] == 200, timeout=60, what="/readyz 200")
    status, report = readyz(web.base)
    assert report["checks"]["workers"]["alive"] == 1 and report["checks"]["beat"]["ok"]
    assert report["checks"]["queue_age"]["oldest_s"] <= 2
    wait_until(lambda: stack.query(
        f"SELECT count(*) FROM documents_document WHERE state = 'done' "
        f"AND id IN ({','.join('?' * len(ids))})", *ids)[0][0] == len(ids),
        timeout=60, what="the waiting documents done")

    # Nothing secret or addressable in it, and no login needed.
    text = requests.get(web.base + "/readyz", timeout=10).text
    assert stack.redis.password not in text and "redis://" not in text and "127.0.0.1" not in text

    # Cheap enough to poll every few seconds.
    took = []
    for _ in range(20):
        took.append(readyz(web.base)[1]["took_ms"])
    measure(readyz_p50_ms=round(statistics.median(took), 1), readyz_max_ms=max(took))
    assert statistics.median(took) < 250


def test_redis_refusing_writes_gives_503_saves_nothing_and_recovers(make_stack, measure):
    stack = make_stack()
    stack.start_worker("w1")
    web = stack.start_web(workers=1)
    client = web.session()
    redis = stack.redis.client()

    def documents() -> int:
        return stack.query("SELECT count(*) FROM documents_document")[0][0]

    # 1. Out of memory under noeviction: Redis refuses every write with OOM. The cap is set
    # well below what Redis uses, so freed buffers cannot bring it back under (a cap just
    # above the usage let the probe see it under the cap again, once under load).
    redis.config_set("maxmemory", str(int(redis.info("memory")["used_memory"]) // 2))
    before = documents()
    refused = client.post("/api/documents/", json={"title": "t", "text": "x" * 4000})
    assert refused.status_code == 503, refused.text
    assert "nothing was saved" in refused.json()["error"]
    assert documents() == before
    status, report = readyz(web.base)
    assert status == 503 and "memory limit reached" in " ".join(
        report["checks"]["redis"]["problems"])
    redis.config_set("maxmemory", "1gb")  # the cause is gone; nothing is restarted
    wait_until(lambda: client.post("/api/documents/", json={"title": "t", "text": "after oom"}
                                   ).status_code == 202, timeout=20, what="submissions accepted")

    # 2. A failed snapshot (the disk refused it): Redis answers every write with MISCONF.
    # Killing the snapshot child by a signal is how Redis records a failed background save.
    redis.config_set("rdb-key-save-delay", "1000000")
    redis.bgsave()
    child = wait_until(lambda: _bgsave_child(stack.redis.proc.pid), timeout=10,
                       what="snapshot child running")
    child.kill()
    wait_until(lambda: redis.info("persistence")["rdb_last_bgsave_status"] == "err",
               timeout=10, what="snapshot recorded as failed")
    before = documents()
    refused = client.post("/api/documents/", json={"title": "t", "text": "during misconf"})
    assert refused.status_code == 503, refused.text
    assert documents() == before
    status, report = readyz(web.base)
    assert status == 503 and any("MISCONF" in p for p in report["checks"]["redis"]["problems"])
    redis.config_set("rdb-key-save-delay", "0")
    redis.bgsave()  # what Redis's own save schedule retries once the disk is back
    wait_until(lambda: redis.info("persistence")["rdb_last_bgsave_status"] == "ok",
               timeout=20, what="snapshot succeeds again")
    accepted = client.submit("after misconf")
    wait_until(lambda: stack.query("SELECT state FROM documents_document WHERE id = ?",
                                   accepted)[0][0] == "done", timeout=60,
               what="a document submitted after recovery is processed")
    measure(refused_while_oom=1, refused_while_misconf=1, saved_while_refusing=0)


def _bgsave_child(redis_pid: int):
    import psutil

    children = psutil.Process(redis_pid).children()
    return children[0] if children else None
