"""What one recovery pass costs as the backlog grows, against the broker scan it replaced.

    .venv/bin/python loadtests/recovery_cost.py [--backlogs 1000,10000,100000] [--passes 20]

A real redis-server and SQLite file (tests/procs.Stack, no workers, so every message stays
queued). For each backlog size, that many documents are queued for real (rows committed,
messages published by ``document_enqueue`` with their headers), plus one orphan (a row
queued long ago whose message is gone). Then, --passes times each:

- the recovery pass the leading beat runs every second (``documents_recover``): wall time,
  this process's CPU time, and Redis's own time (``INFO commandstats``), and that it found the
  orphan;
- the scan the reconciler did before issue 16: every queued message read (LRANGE of the
  queue, HVALS of ``unacked``) and parsed, in one transaction.

Prints a table and writes loadtests/results/recovery_cost.{json,png}.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from celery_conf.policy import queue_lists  # noqa: E402
from loadtests.common import new_figure, progress, save_figure, save_json, summary  # noqa: E402
from tests.procs import Stack, make_template_db  # noqa: E402

# The documents queue's lists, one per priority step (celery_conf/policy.py).
QUEUE_LISTS = queue_lists("documents")


def queued_in_redis(client: Any) -> int:
    return sum(client.llen(key) for key in QUEUE_LISTS)


def redis_usec(client: Any) -> int:
    stats = client.info("commandstats")
    return sum(int(v["usec"]) for v in stats.values())


def old_scan(client: Any) -> int:
    """The reconciler's broker scan before issue 16: every queued and unacked message."""
    pipe = client.pipeline(transaction=True)
    for key in QUEUE_LISTS:
        pipe.lrange(key, 0, -1)
    pipe.hvals("unacked")
    *lists, unacked = pipe.execute()
    queued = [raw for entries in lists for raw in entries]
    found = 0
    for raw in list(queued) + [json.dumps(json.loads(e)[0]) for e in unacked]:
        payload = json.loads(raw)
        body = payload["body"]
        if payload.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args, _kwargs, _embed = json.loads(body)
        found += 1 if args else 0
    return found


def measure(fn: Any, client: Any, passes: int) -> dict[str, Any]:
    walls, cpus, redis = [], [], []
    for _ in range(passes):
        before_usec = redis_usec(client)
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(1000 * (time.perf_counter() - wall))
        cpus.append(1000 * (time.process_time() - cpu))
        # INFO itself is counted: subtract one INFO's share by measuring it alone.
        redis.append((redis_usec(client) - before_usec) / 1000)
    return {"wall_ms": summary(walls), "cpu_ms": summary(cpus), "redis_ms": summary(redis)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlogs", default="1000,10000,100000")
    parser.add_argument("--passes", type=int, default=20)
    args = parser.parse_args()
    backlogs = sorted(int(n) for n in args.backlogs.split(","))

    base = Path(tempfile.mkdtemp(prefix="recovery-cost-"))
    stack = Stack(base_dir=base / "stack", template_db=make_template_db(base / "template"))
    try:
        os.environ.update({k: v for k, v in stack.env.items()
                           if k.startswith(("DJANGO_", "DATABASE_", "REDIS_", "PLATFORM_"))})
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.utils import timezone

        from apps.documents.models import Document
        from apps.documents.recovery import documents_recover
        from apps.documents.services import document_enqueue

        owner = get_user_model().objects.get(username="tester")
        client = stack.redis.client()
        results: list[dict[str, Any]] = []
        queued = 0
        for backlog in backlogs:
            progress(f"queueing documents up to {backlog:,}")
            while queued < backlog:
                batch = min(2000, backlog - queued)
                docs = Document.objects.bulk_create(
                    Document(owner=owner, title="t", source="paste", content="some words here",
                             size_bytes=15) for _ in range(batch))
                for doc in docs:
                    document_enqueue(document_id=doc.pk, generation=0)
                queued += batch
                progress(f"  {queued:,} queued, {queued_in_redis(client):,} in Redis")
            orphan = Document.objects.create(owner=owner, title="orphan", source="paste",
                                             content="lost words", size_bytes=10)
            Document.objects.filter(pk=orphan.pk).update(
                updated_at=timezone.now() - timedelta(hours=1))

            found: list[list[int]] = []

            def recovery_pass(found: list[list[int]] = found,
                              orphan: Any = orphan) -> None:
                result = documents_recover(grace_s=30)
                found.append(result.orphaned)
                # Put the orphan back as it was (its new message goes to the back of the
                # queue, behind the watermark) so every pass has one to find.
                Document.objects.filter(pk=orphan.pk).update(
                    state="queued", updated_at=timezone.now() - timedelta(hours=1))

            progress(f"backlog {backlog:,}: {args.passes} recovery passes")
            new = measure(recovery_pass, client, args.passes)
            progress(f"backlog {backlog:,}: {args.passes} scans as before")
            old = measure(lambda: old_scan(client), client, args.passes)
            assert all(f == [orphan.pk] for f in found), found
            Document.objects.filter(pk=orphan.pk).update(state="done")  # this step's only
            results.append({"backlog": backlog, "recovery": new, "scan_before": old,
                            "orphan_found_every_pass": True})
            queued = queued_in_redis(client)
        save_json("recovery_cost", {"passes": args.passes, "results": results,
                                    "load_average": os.getloadavg()})
        print(f"{'backlog':>9}  {'recovery p50 wall/cpu/redis ms':>32}  "
              f"{'scan before p50 wall/cpu/redis ms':>36}")
        for r in results:
            n, o = r["recovery"], r["scan_before"]
            print(f"{r['backlog']:>9,}  {n['wall_ms']['p50']:>10.2f} {n['cpu_ms']['p50']:>10.2f} "
                  f"{n['redis_ms']['p50']:>10.3f}  {o['wall_ms']['p50']:>12.2f} "
                  f"{o['cpu_ms']['p50']:>11.2f} {o['redis_ms']['p50']:>11.3f}")
        fig, ax = new_figure("One pass: recovery (issue 16) vs the broker scan before")
        xs = [r["backlog"] for r in results]
        for key, label in (("recovery", "recovery pass"), ("scan_before", "broker scan before")):
            ax.plot(xs, [r[key]["wall_ms"]["p50"] for r in results], marker="o",
                    label=f"{label}, wall p50")
            ax.plot(xs, [r[key]["redis_ms"]["p50"] for r in results], marker="x",
                    linestyle="--", label=f"{label}, Redis busy p50")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("documents queued")
        ax.set_ylabel("ms per pass")
        ax.legend()
        save_figure(fig, "recovery_cost")
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
