"""Publish-to-browser latency and sustained event rate of the live-event fan-out.

    .venv/bin/python loadtests/sse_fanout.py [--clients 1000] [--rates 5,10,20,40] [--seconds 5]

1,000 concurrent SSE connections (aiohttp, one process) spread over uvicorn's two web worker
processes; a separate publisher process sends broadcasts at each rate for --seconds, each
carrying its send time; every connection records the delay to receipt. The same run then
repeats the fan-out on Django Channels + channels_redis (loadtests/channels_ref/) on the same
Redis and machine as the reference. Loopback only, bounded in count and time. Prints the
figures and writes loadtests/results/sse_fanout.{json,png}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.common import new_figure, progress, save_figure, save_json, summary  # noqa: E402

DRAIN_S = 15.0  # after the last publish, how long stragglers may still arrive


@dataclass
class Fleet:
    """The SSE connections of one system, and what they received."""

    latencies: list[float] = field(default_factory=list)
    received: int = 0
    workers: Counter[int] = field(default_factory=Counter)
    errors: int = 0


async def run_client(session: Any, url: str, headers: dict[str, str], fleet: Fleet,
                     connected: asyncio.Event, stop: asyncio.Event) -> None:
    try:
        async with session.get(url, headers=headers) as response:
            buffer = b""
            seen_worker = False
            async for chunk in response.content.iter_any():
                buffer += chunk
                *frames, buffer = buffer.split(b"\n\n")
                now = time.time()
                for frame in frames:
                    if not seen_worker and frame.startswith(b": worker "):
                        fleet.workers[int(frame.split()[2])] += 1
                        seen_worker = True
                        connected.set()
                        continue
                    at = frame.find(b'"s":')
                    if at >= 0:
                        sent = float(frame[at + 4:frame.index(b",", at)])
                        fleet.latencies.append(now - sent)
                        fleet.received += 1
                if stop.is_set():
                    return
    except Exception:
        fleet.errors += 1
        connected.set()


async def open_fleet(url: str, headers: dict[str, str], n: int) -> tuple[Fleet, list[Any], Any,
                                                                          asyncio.Event]:
    import aiohttp

    fleet = Fleet()
    stop = asyncio.Event()
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, force_close=True),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=30))
    tasks = []
    for batch in range(0, n, 100):
        events = [asyncio.Event() for _ in range(min(100, n - batch))]
        tasks += [asyncio.create_task(run_client(session, url, headers, fleet, ev, stop))
                  for ev in events]
        await asyncio.wait_for(asyncio.gather(*(ev.wait() for ev in events)), 60)
    return fleet, tasks, session, stop


async def measure_system(name: str, url: str, headers: dict[str, str], publish: list[str],
                         clients: int, rates: list[float], seconds: float,
                         env: dict[str, str]) -> dict[str, Any]:
    progress(f"{name}: opening {clients} SSE connections")
    fleet, tasks, session, stop = await open_fleet(url, headers, clients)
    progress(f"{name}: connected, per worker {dict(fleet.workers)}, errors {fleet.errors}")
    phases = []
    for rate in rates:
        fleet.latencies, fleet.received = [], 0
        count = int(rate * seconds)
        expected = count * (clients - fleet.errors)
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, *publish, str(rate), str(count), cwd=ROOT, env=env)
        await proc.wait()
        publish_s = time.monotonic() - started
        deadline = time.monotonic() + DRAIN_S
        while fleet.received < expected and time.monotonic() < deadline:
            await asyncio.sleep(0.1)  # polling a counter against a deadline
        elapsed = time.monotonic() - started
        lat = summary(fleet.latencies)
        phase = {"rate": rate, "events": count, "expected": expected,
                 "delivered": fleet.received, "delivered_per_s": fleet.received / elapsed,
                 "publish_s": publish_s, "p50_ms": lat["p50"] * 1000,
                 "p99_ms": lat["p99"] * 1000, "max_ms": lat["max"] * 1000,
                 "latencies_ms": [round(x * 1000, 2) for x in fleet.latencies[::50]]}
        phases.append(phase)
        progress(f"{name}: {rate:g} ev/s -> delivered {fleet.received}/{expected}, "
                 f"p50 {phase['p50_ms']:.1f} ms, p99 {phase['p99_ms']:.1f} ms, "
                 f"max {phase['max_ms']:.1f} ms")
        if fleet.received < expected * 0.999 or phase["p99_ms"] > 2000:
            progress(f"{name}: not sustained at {rate:g} ev/s; stopping here")
            break
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await session.close()
    # The highest rate up to which every phase delivered everything with p99 within 1 s.
    sustained = 0.0
    for p in phases:
        if p["delivered"] < p["expected"] * 0.999 or p["p99_ms"] > 1000:
            break
        sustained = p["rate"]
    return {"system": name, "clients": clients, "per_worker": dict(fleet.workers),
            "connect_errors": fleet.errors, "phases": phases,
            "sustained_events_per_s": sustained}


# --- publishers (run as child processes, so they do not share the clients' CPU time) -------
def publish_product(rate: float, count: int) -> None:
    import django

    django.setup()
    from apps.events.bus import publish_event

    for i in range(count):
        publish_event(kind="broadcast", user_id=None,
                      data={"s": time.time(), "n": i, "message": "bench", "sender": "bench"})
        time.sleep(1 / rate)  # pacing of the load


def publish_channels(rate: float, count: int) -> None:
    from channels.layers import get_channel_layer

    async def run() -> None:
        layer = get_channel_layer()
        for i in range(count):
            body = json.dumps({"s": time.time(), "n": i, "message": "bench"})
            await layer.group_send("bench", {"type": "bench.event",
                                             "frame": f"event: broadcast\ndata: {body}\n\n"})
            await asyncio.sleep(1 / rate)

    asyncio.run(run())


def plot(results: list[dict[str, Any]]) -> Path:
    fig, (left, right) = new_figure("SSE fan-out, 1,000 connections over 2 web workers", ncols=2)
    for res in results:
        rates = [p["rate"] for p in res["phases"]]
        left.plot(rates, [p["p50_ms"] for p in res["phases"]], marker="o",
                  label=f"{res['system']} p50")
        left.plot(rates, [p["p99_ms"] for p in res["phases"]], marker="x", linestyle="--",
                  label=f"{res['system']} p99")
        right.plot(rates, [p["delivered_per_s"] for p in res["phases"]], marker="o",
                   label=res["system"])
    left.set(xlabel="events published per second", ylabel="publish-to-client latency (ms)",
             yscale="log")
    right.set(xlabel="events published per second", ylabel="deliveries per second (all clients)")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    return save_figure(fig, "sse_fanout")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rates", default="5,10,20,40", help="events/s, one phase each")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each phase")
    parser.add_argument("--skip-channels", action="store_true")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, args.clients * 4 + 1024))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # children inherit it

    from tests.procs import BIN, Stack, free_port, make_template_db, spawn, wait_until

    base = Path(tempfile.mkdtemp(prefix="sse-fanout-"))
    stack = Stack(base_dir=base / "stack", template_db=make_template_db(base / "template"),
                  env_overrides={"EVENTS_CLIENT_QUEUE": "1024"})
    results = []
    try:
        web = stack.start_web(workers=2)
        cookie = "; ".join(f"{k}={v}" for k, v in web.session().http.cookies.items())
        results.append(asyncio.run(measure_system(
            "event bus (this product)", web.base + "/api/notifications/stream/",
            {"Cookie": cookie}, ["publish-product"], args.clients, rates, args.seconds,
            stack.env)))
        web.proc.stop()
        if not args.skip_channels:
            port = free_port()
            env = {**stack.env, "DJANGO_SETTINGS_MODULE": "loadtests.channels_ref.settings",
                   "CHANNELS_REDIS_URL": stack.redis.url.rsplit("/", 1)[0] + "/1"}
            proc = spawn(f"channels-{port}", [
                str(BIN / "uvicorn"), "loadtests.channels_ref.asgi:application", "--host",
                "127.0.0.1", "--port", str(port), "--workers", "2", "--no-access-log",
            ], env=env, log_dir=stack.log_dir)
            stack.procs.append(proc)
            import socket

            wait_until(lambda: socket.create_connection(("127.0.0.1", port), 1).close() or True,
                       timeout=60, what="channels server listening")
            results.append(asyncio.run(measure_system(
                "Channels + channels_redis", f"http://127.0.0.1:{port}/stream/", {},
                ["publish-channels"], args.clients, rates, args.seconds, env)))
    finally:
        stack.stop()
    path = save_json("sse_fanout", {"clients": args.clients, "seconds": args.seconds,
                                    "cpus": os.cpu_count(), "results": results})
    png = plot(results)
    print()
    for res in results:
        print(f"{res['system']}: {res['clients']} connections {res['per_worker']}, "
              f"sustained {res['sustained_events_per_s']:g} events/s")
        for p in res["phases"]:
            print(f"  {p['rate']:>5g} ev/s: delivered {p['delivered']}/{p['expected']} "
                  f"({p['delivered_per_s']:.0f}/s), latency p50 {p['p50_ms']:.1f} ms, "
                  f"p99 {p['p99_ms']:.1f} ms, max {p['max_ms']:.1f} ms")
    print(f"\nwrote {path} and {png}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith("publish-"):
        mode, rate, count = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
        (publish_product if mode == "publish-product" else publish_channels)(rate, count)
    else:
        main()
