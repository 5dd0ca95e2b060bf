"""What WAIT and min-replicas cost per write, and what they save in a Sentinel failover.

    .venv/bin/python loadtests/sentinel_write_safety.py [--writes 3000] [--submits 200] [--kills 3]

On a Sentinel group (tests/sentinel.py: a primary, a replica, three sentinels on loopback):
(1) the latency of one client's enqueue (an LPUSH of a ~1 KB task message, as kombu sends
after a submit) with asynchronous replication, with ``min-replicas-to-write 1`` /
``min-replicas-max-lag 10``, and with ``WAIT 1 1000`` after each LPUSH; (2) the 202 latency of
document submissions through a web worker, asynchronous and with min-replicas; (3) SIGKILL the
primary while one client LPUSHes numbered items as fast as it can, and count the items
Redis had acknowledged that the promoted replica lacks, with and without WAIT. Prints a
table, writes loadtests/results/sentinel_write_safety.{json,png}.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

from loadtests.common import (  # noqa: E402
    new_figure,
    progress,
    save_figure,
    save_json,
    summary,
)
from tests.procs import Stack, make_template_db  # noqa: E402
from tests.sentinel import SentinelGroup  # noqa: E402

MESSAGE = "x" * 1000
MIN_REPLICAS = {"min-replicas-to-write": "1", "min-replicas-max-lag": "10"}


def enqueue_latencies(client: redis.Redis, count: int, *, wait: bool) -> list[float]:
    out = []
    for _ in range(count):
        started = time.perf_counter()
        client.lpush("bench", MESSAGE)
        if wait:
            client.execute_command("WAIT", 1, 1000)
        out.append((time.perf_counter() - started) * 1000)
    client.delete("bench")
    return out


def submit_latencies(stack: Stack, count: int) -> list[float]:
    client = stack.start_web(workers=1).session()
    out = []
    for i in range(count):
        started = time.perf_counter()
        response = client.post("/api/documents/", json={"title": "", "text": f"doc {i}"})
        assert response.status_code == 202, response.text
        out.append((time.perf_counter() - started) * 1000)
    return out


def lost_in_failover(work: Path, *, wait: bool, kills: int) -> list[dict[str, int]]:
    """Acknowledged writes missing on the promoted replica, per SIGKILL of the primary."""
    group = SentinelGroup(work).start()
    results = []
    try:
        for k in range(kills):
            primary = group.primary()
            direct = primary.client()  # straight to the primary: no reconnect elsewhere
            acked: list[int] = []
            stop = threading.Event()

            def write(direct: redis.Redis = direct, acked: list[int] = acked,
                      stop: threading.Event = stop, key: str = f"seq{k}") -> None:
                n = 0
                while not stop.is_set():
                    n += 1
                    try:
                        direct.rpush(key, n)
                        if wait:
                            direct.execute_command("WAIT", 1, 1000)
                    except redis.RedisError:
                        return
                    acked.append(n)

            thread = threading.Thread(target=write, daemon=True)
            thread.start()
            time.sleep(1.0)  # a second of writes at full speed before the kill (load, not sync)
            old = group.kill_primary()
            stop.set()
            thread.join(timeout=10)
            new = group.wait_promotion(old)
            kept = set(int(v) for v in new.client().lrange(f"seq{k}", 0, -1))
            lost = sum(1 for n in acked if n not in kept)
            results.append({"acked": len(acked), "lost": lost})
            progress(f"  wait={wait} kill {k + 1}: {len(acked)} acknowledged, {lost} lost")
            group.bring_back(old)
    finally:
        group.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=3000)
    parser.add_argument("--submits", type=int, default=200)
    parser.add_argument("--kills", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sentinel-write-safety-"))
    data: dict[str, object] = {"machine": "2 cores, shared with other engineers' tests"}

    progress("enqueue latency: asynchronous, min-replicas, WAIT")
    group = SentinelGroup(work / "enqueue").start()
    try:
        client = group.client()
        enqueue = {"async": summary(enqueue_latencies(client, args.writes, wait=False))}
        client.config_set("min-replicas-to-write", 1)
        client.config_set("min-replicas-max-lag", 10)
        enqueue["min_replicas"] = summary(enqueue_latencies(client, args.writes, wait=False))
        client.config_set("min-replicas-to-write", 0)
        enqueue["wait"] = summary(enqueue_latencies(client, args.writes, wait=True))
    finally:
        group.stop()
    data["enqueue_ms"] = enqueue

    template = make_template_db(work / "template")
    submit: dict[str, object] = {}
    for name, overrides in (("async", {}), ("min_replicas", MIN_REPLICAS)):
        progress(f"202 latency of {args.submits} submissions: {name}")
        stack = Stack(base_dir=work / f"submit-{name}", template_db=template,
                      redis_overrides=overrides,
                      env_overrides={"DOCUMENTS_PROCESSING_SECONDS": "0"})
        try:
            submit[name] = summary(submit_latencies(stack, args.submits))
        finally:
            stack.stop()
    data["submit_202_ms"] = submit

    progress("acknowledged writes lost per failover, asynchronous and with WAIT")
    data["failover"] = {
        "async": lost_in_failover(work / "lost-async", wait=False, kills=args.kills),
        "wait": lost_in_failover(work / "lost-wait", wait=True, kills=args.kills),
    }
    path = save_json("sentinel_write_safety", data)

    print(f"{'enqueue (ms)':<16}{'p50':>8}{'p99':>8}")
    for name, s in enqueue.items():
        print(f"{name:<16}{s['p50']:>8.3f}{s['p99']:>8.3f}")
    print(f"{'submit 202 (ms)':<16}{'p50':>8}{'p99':>8}")
    for name, s in submit.items():
        print(f"{name:<16}{s['p50']:>8.2f}{s['p99']:>8.2f}")  # type: ignore[index]
    for name, runs in data["failover"].items():  # type: ignore[attr-defined]
        print(f"failover {name}: lost {[r['lost'] for r in runs]} of "
              f"{[r['acked'] for r in runs]} acknowledged")

    fig, (left, right) = new_figure("Sentinel: write safety, cost and loss", ncols=2)
    names = list(enqueue)
    left.bar([f"{n}\np50" for n in names], [enqueue[n]["p50"] for n in names])
    left.bar([f"{n}\np99" for n in names], [enqueue[n]["p99"] for n in names])
    left.set_ylabel("enqueue latency, ms (one client)")
    runs = data["failover"]
    right.bar(["async", "WAIT 1"], [sum(r["lost"] for r in runs["async"]),  # type: ignore[index]
                                     sum(r["lost"] for r in runs["wait"])])  # type: ignore[index]
    right.set_ylabel(f"acknowledged writes lost in {args.kills} failovers")
    save_figure(fig, "sentinel_write_safety")
    progress(f"wrote {path}")


if __name__ == "__main__":
    main()
