"""How many PostgreSQL connections each process type holds, idle and under load.

    .venv/bin/python loadtests/db_connections.py [--documents 200] [--clients 16]
        [--streams 100] [--web-workers 2] [--celery-workers 2] [--concurrency 2 4]
        [--pool-sizes 0 4]

For each web pool size (DATABASE_WEB_POOL_SIZE; 0 = no pool) and worker concurrency: a fresh
platform on a real PostgreSQL (tests/pgserver.py) with --web-workers uvicorn workers,
--celery-workers Celery workers, an elected beat and Flower; idle counts; then --documents
submissions from --clients concurrent clients with --streams event streams open, sampling
pg_stat_activity by application_name every 20 ms until every document is done; then idle
again. Also the cost of one connection (connect + scram-sha-256 authentication + a query),
which a process without a pool pays once per request and per task.
Prints progress and a table, writes loadtests/results/db_connections.{json,png}.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common import new_figure, progress, save_figure, save_json, summary  # noqa: E402
from tests.database.connections import KINDS, measure_load, start_flower  # noqa: E402
from tests.pgserver import make_template_pg  # noqa: E402
from tests.procs import Stack  # noqa: E402


def connect_cost_ms(template, rounds: int = 50) -> dict[str, float]:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        with template.server.connect(template.name) as conn:
            conn.execute("SELECT 1").fetchone()
        times.append((time.perf_counter() - started) * 1000)
    return summary(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=200)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--celery-workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--pool-sizes", type=int, nargs="+", default=[0, 4],
                        help="DATABASE_WEB_POOL_SIZE values (0: no pool, one connection per "
                             "request in flight)")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="db-connections-"))
    progress("starting PostgreSQL and migrating the template")
    template = make_template_pg(base / "postgres")
    results = []
    try:
        cost = connect_cost_ms(template)
        progress(f"one connection (connect, scram-sha-256, SELECT 1): p50 {cost['p50']:.2f} ms")
        for pool_size, concurrency in itertools.product(args.pool_sizes, args.concurrency):
            label = f"web pool {pool_size}, concurrency {concurrency}"
            progress(f"{label}: starting the platform")
            stack = Stack(base_dir=base / f"p{pool_size}c{concurrency}", template_db=Path("/"),
                          postgres=template, env_overrides={
                              "DOCUMENTS_PROCESSING_SECONDS": "0.2",
                              "DATABASE_WEB_POOL_SIZE": str(pool_size)})
            try:
                for n in range(args.celery_workers):
                    stack.start_worker(f"w{n}", concurrency=concurrency)
                stack.start_elected_beat("beat1")
                start_flower(stack)
                progress(f"{label}: {args.documents} submissions from "
                         f"{args.clients} clients, {args.streams} streams open")
                result = measure_load(stack, web_workers=args.web_workers, clients=args.clients,
                                      documents=args.documents, streams=args.streams)
            finally:
                stack.stop()
            row = {"pool_size": pool_size, "concurrency": concurrency,
                   "web_workers": args.web_workers, "celery_workers": args.celery_workers,
                   **result.__dict__}
            results.append(row)
            progress(f"{label}: peak {result.peak}, idle after {result.idle_after}, "
                     f"{result.accepted} accepted (202 p50 {result.latency_ms_p50} ms, p99 "
                     f"{result.latency_ms_p99} ms), all done in {result.seconds} s")
    finally:
        template.server.stop()

    print(f"\n{'pool':>5} {'conc':>5} {'type':>7} {'idle':>5} {'peak':>5}")
    for row in results:
        for kind in KINDS:
            print(f"{row['pool_size']:>5} {row['concurrency']:>5} {kind:>7} "
                  f"{row['idle_after'].get(kind, 0):>5} {row['peak'].get(kind, 0):>5}")
    data = {"connect_ms": cost, "runs": results, "args": vars(args),
            "note": "measured on a shared, loaded 2-core machine"}
    print(f"\nwrote {save_json('db_connections', data)}")
    fig, ax = new_figure("PostgreSQL connections per process type (peak under load)")
    width = 0.8 / len(results)
    for i, row in enumerate(results):
        ax.bar([k + i * width for k in range(len(KINDS))],
               [row["peak"].get(kind, 0) for kind in KINDS], width,
               label=f"web pool {row['pool_size']}, {row['celery_workers']} workers x "
                     f"concurrency {row['concurrency']}")
    ax.set_xticks([k + width * (len(results) - 1) / 2 for k in range(len(KINDS))], KINDS)
    ax.set_ylabel("connections")
    ax.legend()
    print(f"wrote {save_figure(fig, 'db_connections')}")


if __name__ == "__main__":
    main()
