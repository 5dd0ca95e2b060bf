"""What each Redis fsync policy costs: enqueue rate, and end-to-end task rate with 2 workers.

    .venv/bin/python loadtests/fsync_cost.py [--messages 2000] [--tasks 2000]

For appendfsync always / everysec / no it starts a fresh redis-server with the platform's config,
then (1) publishes documents.process messages from one client, as a web worker does after a
submit, and (2) lets two real Celery workers (prefork -c 1 each, the durable policy) drain
--tasks messages. Prints a table, writes loadtests/results/fsync_cost.{json,png}.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common import new_figure, progress, save_figure, save_json  # noqa: E402
from tests.procs import Stack, make_template_db  # noqa: E402

POLICIES = ("always", "everysec", "no")


def publish_rate(redis_url: str, count: int) -> float:
    from kombu import Connection, Exchange, Producer, Queue

    queue = Queue("documents", Exchange("documents"), routing_key="documents")
    body = ([0], {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None})
    headers = {"lang": "py", "task": "documents.process", "retries": 0}
    with Connection(redis_url) as conn:
        producer = Producer(conn)
        producer.publish(body, exchange=queue.exchange, routing_key="documents",
                         declare=[queue], serializer="json", headers={**headers, "id": "warm"})
        started = time.perf_counter()
        for i in range(count):
            producer.publish(body, exchange=queue.exchange, routing_key="documents",
                             serializer="json", headers={**headers, "id": f"m{i}"})
        return count / (time.perf_counter() - started)


def drain_rate(stack: Stack, count: int) -> float:
    """Workers ready first, then ``count`` messages; time until the last one is acked."""
    client = stack.redis.client()
    stack.start_worker("w1", concurrency=1)
    stack.start_worker("w2", concurrency=1)
    depth = lambda: client.llen("documents") + client.hlen("unacked")  # noqa: E731
    started = time.monotonic()
    publish_rate(stack.redis.url, count)
    last_report = time.monotonic()
    while (left := depth()) > 0:
        if time.monotonic() - last_report > 5:
            progress(f"  {left} of {count} still queued or running")
            last_report = time.monotonic()
        if time.monotonic() - started > 600:
            raise TimeoutError("workers did not drain the queue in 10 minutes")
        time.sleep(0.02)
    return count / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="messages for the enqueue rate")
    parser.add_argument("--tasks", type=int, default=2000, help="tasks for the end-to-end rate")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fsync-cost-"))
    template = make_template_db(work / "template")
    rows = []
    for policy in POLICIES:
        progress(f"appendfsync {policy}: enqueue {args.messages} messages")
        stack = Stack(base_dir=work / policy, template_db=template,
                      env_overrides={"DOCUMENTS_PROCESSING_SECONDS": "0"},
                      redis_overrides={"appendfsync": policy})
        try:
            enqueue = publish_rate(stack.redis.url, args.messages)
            stack.redis.client().delete("documents")
            progress(f"appendfsync {policy}: 2 workers run {args.tasks} tasks")
            drain = drain_rate(stack, args.tasks)
        finally:
            stack.stop()
        rows.append({"appendfsync": policy, "enqueue_per_s": round(enqueue),
                     "tasks_per_s": round(drain, 1),
                     "enqueue_latency_ms": round(1000 / enqueue, 3)})
        progress(f"appendfsync {policy}: {rows[-1]}")

    print(f"\n{'appendfsync':<12}{'enqueue/s':>12}{'ms/enqueue':>12}{'tasks/s (2 workers)':>22}")
    for r in rows:
        print(f"{r['appendfsync']:<12}{r['enqueue_per_s']:>12}{r['enqueue_latency_ms']:>12}"
              f"{r['tasks_per_s']:>22}")
    info = {"cores": os.cpu_count(), "messages": args.messages, "tasks": args.tasks, "rows": rows}
    print(f"\nwrote {save_json('fsync_cost', info)}")
    fig, (left, right) = new_figure("Redis appendfsync policy: cost on this machine", ncols=2)
    names = [r["appendfsync"] for r in rows]
    left.bar(names, [r["enqueue_per_s"] for r in rows], color="#457b9d")
    left.set_ylabel("messages enqueued per second (1 client)")
    right.bar(names, [r["tasks_per_s"] for r in rows], color="#e76f51")
    right.set_ylabel("tasks completed per second (2 workers)")
    print(f"wrote {save_figure(fig, 'fsync_cost')}")


if __name__ == "__main__":
    main()
