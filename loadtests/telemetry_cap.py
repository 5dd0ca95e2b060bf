"""What one telemetry stream costs its web worker in CPU, to size the per-worker cap.

    .venv/bin/python loadtests/telemetry_cap.py [--streams 40] [--rates 25,50] [--seconds 6]

One uvicorn worker serves --streams telemetry streams at each rate (plain sockets from this
process, read continuously by one selector loop); the worker's CPU time (user + system, /proc
through psutil) over --seconds gives the CPU per stream. The cap in settings
(TELEMETRY_STREAMS_PER_WORKER) is half a core divided by the cost of one stream at the highest
rate a page may ask for. Writes loadtests/results/telemetry_cap.{json,png}.
"""

from __future__ import annotations

import argparse
import selectors
import socket
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.common import new_figure, progress, save_figure, save_json  # noqa: E402

BUDGET_PCT = 50.0  # of one core, per worker, for telemetry: the rest serves everything else


def open_telemetry(base: str, cookie: str, rate: float, n: int) -> list[socket.socket]:
    parts = urlsplit(base)
    socks = []
    for _ in range(n):
        sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        sock.sendall(f"GET /api/telemetry/stream/?rate={rate:g} HTTP/1.1\r\n"
                     f"Host: {parts.hostname}\r\nCookie: {cookie}\r\n\r\n".encode())
        sock.setblocking(False)
        socks.append(sock)
    return socks


def drain(socks: list[socket.socket], seconds: float) -> int:
    selector = selectors.DefaultSelector()
    for sock in socks:
        selector.register(sock, selectors.EVENT_READ)
    got, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.2):
            chunk = key.fileobj.recv(65536)  # type: ignore[union-attr]
            got += chunk.count(b"event: sample")
    selector.close()
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=40)
    parser.add_argument("--rates", default="25,50")
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()

    import psutil

    from tests.notifications.conftest import cookie_of
    from tests.notifications.streamcost import WorkerCost
    from tests.procs import Stack, make_template_db

    base = Path(tempfile.mkdtemp(prefix="telemetry-cap-"))
    stack = Stack(base_dir=base / "stack", template_db=make_template_db(base / "template"),
                  env_overrides={"TELEMETRY_STREAMS_PER_WORKER": str(args.streams + 1),
                                 "TELEMETRY_STREAMS_PER_USER": str(args.streams + 1)})
    rows = []
    try:
        web = stack.start_web(workers=1)
        cookie = cookie_of(web.session())
        pid = web.proc.pid  # one worker: uvicorn serves in its own process
        assert psutil.Process(pid).is_running()
        for rate in (float(r) for r in args.rates.split(",")):
            socks = open_telemetry(web.base, cookie, rate, args.streams)
            drain(socks, 1.0)  # past the connection set-up
            before = WorkerCost.of(pid, stack.db_path).cpu_s
            samples = drain(socks, args.seconds)
            used = WorkerCost.of(pid, stack.db_path).cpu_s - before
            for sock in socks:
                sock.close()
            pct = used / args.seconds * 100
            per_stream = pct / args.streams
            row = {"rate_hz": rate, "streams": args.streams, "cpu_pct": pct,
                   "cpu_pct_per_stream": per_stream,
                   "samples_per_s": samples / args.seconds,
                   "us_per_sample": used / max(samples, 1) * 1e6,
                   "cap_for_half_a_core": int(BUDGET_PCT / per_stream)}
            rows.append(row)
            progress(f"{rate:g} Hz x {args.streams}: {row}")
            time.sleep(1)
    finally:
        stack.stop()
    save_json("telemetry_cap", {"machine": "2 cores, shared with other engineers' tests",
                                "budget_pct_of_a_core": BUDGET_PCT, "rows": rows})
    fig, ax = new_figure("Telemetry: CPU of one web worker per open stream")
    ax.bar([f"{r['rate_hz']:g} Hz" for r in rows], [r["cpu_pct_per_stream"] for r in rows])
    ax.set_ylabel("% of one core per stream")
    ax.set_xlabel("sample rate")
    progress(f"wrote {save_figure(fig, 'telemetry_cap')}")


if __name__ == "__main__":
    main()
