"""What the frameworks cost before a document does anything: the floor under its CPU.

    .venv/bin/python loadtests/floors.py [--requests 600] [--tasks 3000] [--repeats 2]

The web as shipped (uvicorn with the units' flags, 2 worker processes, loadtests/ceiling.py's
WEB_ARGS), 4 clients, --requests requests of each kind, the web's CPU per request (/proc):

- ``GET /healthz``: uvicorn, h11 and Django's middleware; no login, database or Redis.
- ``GET /api/documents/<id>/`` logged in: the same, plus the session and user reads and one
  SELECT: what any logged-in API call costs.
- ``POST /api/documents/``: the submit (the row, the usage count, the message, the event).

The Celery worker (the platform's app, prefork -c 1, its durable policy): CPU per no-op task
(loadtests/bench_tasks.py), from loadtests/process_width.py's drain. What a document costs the
worker beyond it is in loadtests/ceiling.py's drain phase.

So a document's CPU splits into what any request and any task costs in Django, uvicorn and
Celery here, and what the platform adds (docs/benchmarks.md, "Where the limit is").
Writes loadtests/results/floors.{json,png}.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.ceiling import ENV, SUBMITTERS, WEB_ARGS, WEB_WORKERS  # noqa: E402
from loadtests.common import (  # noqa: E402
    load_note,
    new_figure,
    progress,
    save_figure,
    save_json,
)
from loadtests.costs import tree_cpu  # noqa: E402
from loadtests.process_width import CONFIGS  # noqa: E402
from loadtests.process_width import run_one as drain_noop  # noqa: E402
from tests.procs import Client, Stack, make_template_db  # noqa: E402

WARM_UP = 40  # requests of each kind before measuring


def requests_of(clients: list[Client], count: int, call) -> None:  # type: ignore[no-untyped-def]
    """``count`` calls of ``call(client, i)`` spread over the clients, all at once."""
    errors: list[BaseException] = []

    def run(client: Client, n: int) -> None:
        try:
            for i in range(n):
                call(client, i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    shares = [count // len(clients) + (i < count % len(clients)) for i in range(len(clients))]
    threads = [threading.Thread(target=run, args=(c, n)) for c, n in zip(clients, shares,
                                                                          strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def web_floors(work: Path, template: Path, count: int, tag: str) -> dict[str, float]:
    stack = Stack(base_dir=work / f"web{tag}", template_db=template, env_overrides=ENV)
    try:
        web = stack.start_web(workers=WEB_WORKERS, uvicorn_args=WEB_ARGS)
        clients = [Client.login(web.base, "tester", "tester-password-1")
                   for _ in range(SUBMITTERS)]
        document = clients[0].submit("a document to read back " * 20, title="floor")

        def healthz(client: Client, _: int) -> None:
            assert client.get("/healthz").status_code == 200

        def read(client: Client, _: int) -> None:
            assert client.get(f"/api/documents/{document}/").status_code == 200

        def submit(client: Client, i: int) -> None:
            client.submit(f"floor document {i} " * 20, title=f"floor {i}")

        out = {}
        for name, call in (("healthz", healthz), ("logged_in_get", read), ("submit", submit)):
            requests_of(clients, WARM_UP, call)
            before = tree_cpu([web.proc.pid])
            requests_of(clients, count, call)
            out[f"{name}_web_cpu_ms"] = 1000 * (tree_cpu([web.proc.pid]) - before) / count
        progress("web CPU per request: " + ", ".join(f"{k} {v:.2f} ms" for k, v in out.items()))
        return out
    finally:
        stack.stop()


def plot(floors: dict[str, float], note: str, name: str) -> Path:
    fig, ax = new_figure(f"CPU per request and per task, {os.cpu_count()} cores")
    bars = [("web: any request\n(uvicorn, h11,\nmiddleware)", floors["healthz_web_cpu_ms"]),
            ("web: a logged-in\nAPI call (+ session,\nuser, one SELECT)",
             floors["logged_in_get_web_cpu_ms"]),
            ("web: the submit", floors["submit_web_cpu_ms"]),
            ("worker: any task\n(Celery, the\nplatform's policy)",
             floors["noop_task_worker_cpu_ms"])]
    ax.bar(range(len(bars)), [v for _, v in bars],
           color=["#8ecae6", "#219ebc", "#023047", "#e76f51"])
    for i, (_, v) in enumerate(bars):
        ax.text(i, v, f"{v:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(bars)), [label for label, _ in bars], fontsize=8)
    ax.set_ylabel("CPU (ms), medians")
    ax.set_ylim(0, max(v for _, v in bars) * 1.15)
    ax.set_title(note, fontsize=7)
    return save_figure(fig, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=600, help="requests of each kind")
    parser.add_argument("--tasks", type=int, default=3000, help="no-op tasks drained")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--output", default="floors")
    args = parser.parse_args()
    if args.requests < SUBMITTERS or args.tasks < 1 or args.repeats < 1:
        parser.error(f"--requests must be >= {SUBMITTERS}, --tasks and --repeats >= 1")
    work = Path(tempfile.mkdtemp(prefix="floors-"))
    template = make_template_db(work / "template")
    platform = next(c for c in CONFIGS if c.app == "platform")
    loads = [os.getloadavg()[0]]
    rows: list[dict[str, Any]] = []
    for repeat in range(1, args.repeats + 1):
        row = web_floors(work, template, args.requests, f"-{repeat}")
        row["noop_task_worker_cpu_ms"] = drain_noop(
            work, template, platform, 1, args.tasks, f"-{repeat}")["cpu_ms_per_task"]
        rows.append(row)
    loads.append(os.getloadavg()[0])
    floors = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
    print()
    print(f"web, any request (uvicorn, h11, Django's middleware): "
          f"{floors['healthz_web_cpu_ms']:.2f} ms")
    print(f"web, any logged-in API call (+ session, user, one SELECT): "
          f"{floors['logged_in_get_web_cpu_ms']:.2f} ms")
    print(f"web, the submit: {floors['submit_web_cpu_ms']:.2f} ms")
    print(f"worker, any task (Celery, the platform's policy): "
          f"{floors['noop_task_worker_cpu_ms']:.2f} ms")
    data = {"args": vars(args), "cores": os.cpu_count(), "machine": load_note(loads),
            "floors": floors, "runs": rows}
    print(f"wrote {save_json(args.output, data)}")
    print(f"wrote {plot(floors, data['machine'], args.output)}")


if __name__ == "__main__":
    main()
