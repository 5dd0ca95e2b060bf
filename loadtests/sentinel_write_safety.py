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
import os
import signal
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


def lost_in_failover(work: Path, *, wait: bool, kills: int,
                     lag: bool = False) -> list[dict[str, int]]:
    """Acknowledged writes missing on the promoted replica, per SIGKILL of the primary.

    A SIGKILLed process on a live host loses nothing it has written to a socket: the kernel
    still delivers the replication stream. What a failover loses is the replica's lag when
    the primary's host (or its network) goes: ``lag`` plays that by freezing the replica
    (SIGSTOP) for a second of writes before the kill, then thawing it. ``wait``: WAIT 1 after
    each write, and a write counts as acknowledged only if the replica confirmed it. Each
    kill on a fresh group: Sentinel refuses a second failover of one master within twice the
    failover timeout.
    """
    results = []
    for k in range(kills):
        group = SentinelGroup(work / f"kill{k}").start()
        try:
            primary = group.primary()
            direct = primary.client()  # straight to the primary: no reconnect elsewhere
            acked: list[int] = []
            stop = threading.Event()

            def write(direct: redis.Redis = direct, acked: list[int] = acked,
                      stop: threading.Event = stop) -> None:
                n = 0
                while not stop.is_set():
                    n += 1
                    try:
                        direct.rpush("seq", f"{n}:{MESSAGE}")  # a task message's size
                        if wait and direct.execute_command("WAIT", 1, 1000) < 1:
                            continue  # the replica did not confirm: not acknowledged
                    except redis.RedisError:
                        return
                    acked.append(n)

            thread = threading.Thread(target=write, daemon=True)
            thread.start()
            time.sleep(1.0)  # a second of writes at full speed before the kill (load, not sync)
            replica = group.replica_of(primary)
            if lag:
                assert replica.proc is not None
                replica.proc.signal(signal.SIGSTOP)
                time.sleep(1.0)  # the replica falls a second behind
            old = group.kill_primary()
            if lag:
                replica.proc.signal(signal.SIGCONT)
            stop.set()
            thread.join(timeout=10)
            new = group.wait_promotion(old)
            kept = set(int(v.split(":", 1)[0]) for v in new.client().lrange("seq", 0, -1))
            lost = sum(1 for n in acked if n not in kept)
            results.append({"acked": len(acked), "lost": lost})
            progress(f"  wait={wait} lag={lag} kill {k + 1}: {len(acked)} acknowledged, "
                     f"{lost} lost")
        finally:
            group.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=3000)
    parser.add_argument("--submits", type=int, default=200)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="alternated submit rounds")
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
    os.environ["TEST_REDIS"] = "sentinel"  # every Stack below runs on a Sentinel group
    submit: dict[str, object] = {}
    latencies: dict[str, list[float]] = {"async": [], "min_replicas": []}
    for round_ in range(args.rounds):  # alternated: the machine's load drifts
        order = [("async", {}), ("min_replicas", MIN_REPLICAS)]
        for name, overrides in order if round_ % 2 == 0 else order[::-1]:
            progress(f"202 latency of {args.submits} submissions: {name}, round {round_ + 1}")
            stack = Stack(base_dir=work / f"submit-{name}-{round_}", template_db=template,
                          redis_overrides=overrides,
                          env_overrides={"DOCUMENTS_PROCESSING_SECONDS": "0"})
            try:
                latencies[name] += submit_latencies(stack, args.submits)
            finally:
                stack.stop()
    for name, values in latencies.items():
        submit[name] = summary(values)
    data["submit_202_ms"] = submit

    progress("acknowledged writes lost per failover, asynchronous and with WAIT")
    data["failover"] = {
        "async": lost_in_failover(work / "lost-async", wait=False, kills=args.kills),
        "async_replica_1s_behind": lost_in_failover(work / "lost-lag", wait=False,
                                                    kills=args.kills, lag=True),
        "wait_replica_1s_behind": lost_in_failover(work / "lost-wait-lag", wait=True,
                                                   kills=args.kills, lag=True),
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
    right.bar(list(runs), [sum(r["lost"] for r in v) for v in runs.values()])  # type: ignore[attr-defined]
    right.tick_params(axis="x", labelrotation=20)
    right.set_ylabel(f"acknowledged writes lost in {args.kills} failovers")
    save_figure(fig, "sentinel_write_safety")
    progress(f"wrote {path}")


if __name__ == "__main__":
    main()
