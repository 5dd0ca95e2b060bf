"""Publish-to-browser latency and sustained event rate of the live-event fan-out.

    .venv/bin/python loadtests/sse_fanout.py [--clients 1000] [--rates 5,10,20,40,80,160,320]
        [--seconds 5] [--client-processes 3] [--burners 2 --name sse_fanout_busy]
        [--http h11] [--bus direct,public] [--skip-channels]

1,000 concurrent SSE connections (bare asyncio protocols, in several client processes, so the
clients are not the limit) spread over uvicorn's two web worker processes; a separate
publisher process sends broadcasts at each rate for --seconds, each carrying its send time;
every connection records the delay to receipt, and each phase the web workers' CPU time per
delivery. The bus is measured as shipped (direct writes to idle sockets, apps/stream_wire.py)
and with ASGI send only (``--bus``); the same run then repeats the fan-out on Django
Channels + channels_redis (loadtests/channels_ref/) on the same Redis and machine as the
reference. ``--http h11`` is what the platform's units run. Loopback only, bounded in count
and time. Prints the figures and writes loadtests/results/<name>.{json,png}; --burners adds
CPU-burning processes (a busy machine) for the whole run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.common import new_figure, progress, save_figure, save_json, summary  # noqa: E402

DRAIN_S = 15.0  # after the last publish, how long stragglers may still arrive
BUS_NAMES = {"direct": "event bus (this product)",
             "public": "event bus, ASGI send only (STREAMS_DIRECT_WRITES=false)"}
CHANNELS_NAME = "Channels + channels_redis"


@dataclass
class Fleet:
    """The SSE connections of one system, and what they received."""

    latencies: list[float] = field(default_factory=list)
    received: int = 0
    workers: Counter[int] = field(default_factory=Counter)
    errors: int = 0


def server_cpu_s(servers: list[psutil.Process]) -> float:
    """CPU seconds (user and system) the web worker processes have used so far."""
    return sum(sum(p.cpu_times()[:2]) for p in servers)


class SSEProtocol(asyncio.Protocol):
    """One SSE connection read with a bare asyncio protocol: far less client CPU per event
    than an HTTP client library, so the fleet measures the servers, not itself. The stream is
    chunked; chunk-size lines never contain a blank line, so frames split on "\\n\\n" as-is."""

    def __init__(self, request: bytes, fleet: Fleet, connected: asyncio.Event) -> None:
        self.request, self.fleet, self.connected = request, fleet, connected
        self.buffer = b""
        self.seen_worker = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.time()
        self.buffer += data
        *frames, self.buffer = self.buffer.split(b"\n\n")
        for frame in frames:
            if not self.seen_worker:
                at = frame.find(b": worker ")
                if at >= 0:
                    self.fleet.workers[int(frame[at + 9:].split()[0])] += 1
                    self.seen_worker = True
                    self.connected.set()
                    continue
            at = frame.find(b'"s":')
            if at >= 0:
                sent = float(frame[at + 4:frame.index(b",", at)])
                self.fleet.latencies.append(now - sent)
                self.fleet.received += 1

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.seen_worker:
            self.fleet.errors += 1
            self.connected.set()


async def open_fleet(url: str, headers: dict[str, str], n: int) -> tuple[Fleet, list[Any]]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    lines = [f"GET {parts.path} HTTP/1.1", f"Host: {parts.hostname}:{parts.port}",
             "Accept: text/event-stream"] + [f"{k}: {v}" for k, v in headers.items()]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode()
    loop = asyncio.get_running_loop()
    fleet = Fleet()
    transports = []
    for batch in range(0, n, 100):
        events = [asyncio.Event() for _ in range(min(100, n - batch))]
        for ev in events:
            try:
                transport, _ = await loop.create_connection(
                    lambda ev=ev: SSEProtocol(request, fleet, ev), parts.hostname, parts.port)
                transports.append(transport)
            except OSError:
                fleet.errors += 1
                ev.set()
        await asyncio.wait_for(asyncio.gather(*(ev.wait() for ev in events)), 60)
    return fleet, transports


async def fleet_process(url: str, headers: dict[str, str], n: int) -> None:
    """One client process: ``n`` connections; answers the parent's commands on stdin/stdout.

    Commands: "phase" (forget what was received), "count" (print how many), "collect" (print
    the latencies), "quit". Several of these share the clients' work across the cores, so the
    fleet is not what limits the measured rate.
    """
    fleet, transports = await open_fleet(url, headers, n)
    print(json.dumps({"workers": dict(fleet.workers), "errors": fleet.errors}), flush=True)
    loop = asyncio.get_running_loop()
    while True:
        command = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
        if command == "phase":
            fleet.latencies, fleet.received = [], 0
            print("{}", flush=True)
        elif command == "count":
            print(json.dumps({"received": fleet.received}), flush=True)
        elif command == "collect":
            print(json.dumps({"received": fleet.received,
                              "latencies": [round(x, 5) for x in fleet.latencies]}), flush=True)
        else:
            break
    for transport in transports:
        transport.close()


class FleetProcs:
    """The client processes of one system, driven line by line."""

    def __init__(self, procs: list[Any]) -> None:
        self.procs = procs

    @classmethod
    async def start(cls, url: str, headers: dict[str, str], clients: int,
                    processes: int) -> tuple[FleetProcs, Counter[int], int]:
        procs, workers, errors = [], Counter(), 0
        for i in range(processes):
            n = clients // processes + (1 if i < clients % processes else 0)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "fleet", url, json.dumps(headers), str(n), cwd=ROOT,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                limit=2**28)
            procs.append(proc)
            # One process connects at a time (100 connections at once, as a single fleet
            # would): a burst from every process made Channels refuse some connections.
            hello = json.loads(await asyncio.wait_for(proc.stdout.readline(), 300))
            workers.update({int(k): v for k, v in hello["workers"].items()})
            errors += hello["errors"]
        return cls(procs), workers, errors

    async def ask(self, command: str) -> list[dict[str, Any]]:
        for proc in self.procs:
            proc.stdin.write(f"{command}\n".encode())
            await proc.stdin.drain()
        return [json.loads(await proc.stdout.readline()) for proc in self.procs]

    async def quit(self) -> None:
        for proc in self.procs:
            proc.stdin.write(b"quit\n")
            await proc.stdin.drain()
        for proc in self.procs:
            await asyncio.wait_for(proc.wait(), 60)


async def measure_system(name: str, url: str, headers: dict[str, str], publish: list[str],
                         clients: int, rates: list[float], seconds: float,
                         env: dict[str, str], processes: int) -> dict[str, Any]:
    progress(f"{name}: opening {clients} SSE connections from {processes} client processes")
    fleet, workers, errors = await FleetProcs.start(url, headers, clients, processes)
    progress(f"{name}: connected, per worker {dict(workers)}, errors {errors}")
    servers = [psutil.Process(pid) for pid in workers]
    phases = []
    for rate in rates:
        await fleet.ask("phase")
        cpu_before = server_cpu_s(servers)
        count = int(rate * seconds)
        expected = count * (clients - errors)
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, *publish, str(rate), str(count), cwd=ROOT, env=env,
            stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        # From the first publish to the last done (the publisher's own start-up excluded).
        publish_s = json.loads(out.decode().strip().splitlines()[-1])["seconds"]
        deadline = time.monotonic() + DRAIN_S
        received = 0
        while time.monotonic() < deadline:
            received = sum(r["received"] for r in await fleet.ask("count"))
            if received >= expected:
                break
            await asyncio.sleep(0.2)  # polling counters against a deadline
        elapsed = time.monotonic() - started
        cpu_s = server_cpu_s(servers) - cpu_before
        answers = await fleet.ask("collect")
        latencies = [x for r in answers for x in r["latencies"]]
        received = sum(r["received"] for r in answers)
        lat = summary(latencies)
        phase = {"rate": rate, "events": count, "expected": expected,
                 "offered_per_s": count / publish_s,
                 "delivered": received, "delivered_per_s": received / elapsed,
                 "publish_s": publish_s, "p50_ms": lat["p50"] * 1000,
                 # The web workers' CPU time per event delivered to one connection: the
                 # fan-out's cost, which a busy machine stretches in time but not in CPU.
                 "server_cpu_us_per_delivery": 1e6 * cpu_s / max(received, 1),
                 "p99_ms": lat["p99"] * 1000, "max_ms": lat["max"] * 1000}
        phases.append(phase)
        progress(f"{name}: {rate:g} ev/s (offered {count / publish_s:.1f}) -> "
                 f"delivered {received}/{expected}, "
                 f"p50 {phase['p50_ms']:.1f} ms, p99 {phase['p99_ms']:.1f} ms, "
                 f"max {phase['max_ms']:.1f} ms, "
                 f"{phase['server_cpu_us_per_delivery']:.1f} us CPU per delivery")
        if received < expected * 0.999 or phase["p99_ms"] > 2000:
            progress(f"{name}: not sustained at {rate:g} ev/s; stopping here")
            break
    await fleet.quit()
    # The highest rate up to which every phase delivered everything with p99 within 1 s.
    # Judged on the offered rate (events / publishing time), not the asked one: on a loaded
    # machine the publisher may fall short of the rate it was asked for.
    sustained = 0.0
    for p in phases:
        if p["delivered"] < p["expected"] * 0.999 or p["p99_ms"] > 1000:
            break
        sustained = round(p["offered_per_s"], 1)
    return {"system": name, "clients": clients, "per_worker": dict(workers),
            "connect_errors": errors, "phases": phases, "client_processes": processes,
            "sustained_events_per_s": sustained}


# --- publishers (run as child processes, so they do not share the clients' CPU time) -------
PUBLISHERS = 4  # concurrent publishes: one slow (fsynced, loaded) publish must not pace the rest


def publish_product(rate: float, count: int) -> None:
    """``count`` broadcasts at ``rate`` on an absolute schedule, several in flight at once, so
    the offered rate is the asked one unless Redis itself cannot keep up."""
    from concurrent.futures import ThreadPoolExecutor

    import django

    django.setup()
    from apps.events.bus import publish_event

    def one(i: int) -> None:
        publish_event(kind="broadcast", user_id=None,
                      data={"s": time.time(), "n": i, "message": "bench", "sender": "bench"})

    started = time.monotonic()
    with ThreadPoolExecutor(PUBLISHERS) as pool:
        for i in range(count):
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # pacing of the load
            pool.submit(one, i)
    print(json.dumps({"seconds": time.monotonic() - started}), flush=True)


def publish_channels(rate: float, count: int) -> None:
    from channels.layers import get_channel_layer

    async def run() -> None:
        layer = get_channel_layer()
        limit = asyncio.Semaphore(PUBLISHERS)

        async def one(i: int) -> None:
            async with limit:
                body = json.dumps({"s": time.time(), "n": i, "message": "bench"})
                await layer.group_send("bench", {"type": "bench.event",
                                                 "frame": f"event: broadcast\ndata: {body}\n\n"})

        started = time.monotonic()
        sends = []
        for i in range(count):
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # pacing of the load
            sends.append(asyncio.create_task(one(i)))
        await asyncio.gather(*sends)
        print(json.dumps({"seconds": time.monotonic() - started}), flush=True)

    asyncio.run(run())


def plot(results: list[dict[str, Any]], name: str, burners: int) -> Path:
    busy = f", {burners} CPU burners beside" if burners else ""
    fig, (left, right) = new_figure(
        f"SSE fan-out, {results[0]['clients']:,} connections over 2 web workers{busy}", ncols=2)
    for res in results:
        rates = [p["offered_per_s"] for p in res["phases"]]
        left.plot(rates, [p["p50_ms"] for p in res["phases"]], marker="o",
                  label=f"{res['system']} p50")
        left.plot(rates, [p["p99_ms"] for p in res["phases"]], marker="x", linestyle="--",
                  label=f"{res['system']} p99")
        right.plot(rates, [p["delivered_per_s"] for p in res["phases"]], marker="o",
                   label=res["system"])
    left.set(xlabel="events published per second (offered)",
             ylabel="publish-to-client latency (ms)", yscale="log")
    right.set(xlabel="events published per second (offered)",
              ylabel="deliveries per second (all clients)")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    return save_figure(fig, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rates", default="5,10,20,40,80,160,320",
                        help="events/s, one phase each")
    parser.add_argument("--client-processes", type=int, default=3,
                        help="processes sharing the SSE clients (so they are not the limit)")
    parser.add_argument("--burners", type=int, default=0,
                        help="CPU-burning processes beside the run (a busy machine)")
    parser.add_argument("--name", default="sse_fanout", help="results file name")
    # h11: what platform/supervisord.conf and the systemd unit run (its header-size cap, adr/0020).
    parser.add_argument("--http", default="h11", choices=["auto", "httptools", "h11"],
                        help="uvicorn's HTTP implementation, for both systems")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each phase")
    parser.add_argument("--skip-channels", action="store_true")
    parser.add_argument("--bus", type=lambda v: v.split(","), default=["direct", "public"],
                        help="the bus's paths to measure, in order: direct (the hub writes "
                             "idle sockets, as shipped), public (ASGI send only)")
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
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(args.burners)]
    try:
        for path in args.bus:
            # STREAMS_DIRECT_WRITES: the hub's direct writes to idle sockets, or ASGI send only.
            web = stack.start_web(workers=2, uvicorn_args=("--http", args.http),
                                  STREAMS_DIRECT_WRITES=str(path == "direct").lower())
            cookie = "; ".join(f"{k}={v}" for k, v in web.session().http.cookies.items())
            results.append(asyncio.run(measure_system(
                BUS_NAMES[path], web.base + "/api/notifications/stream/",
                {"Cookie": cookie}, ["publish-product"], args.clients, rates, args.seconds,
                stack.env, args.client_processes)))
            web.proc.stop()
        if not args.skip_channels:
            port = free_port()
            env = {**stack.env, "DJANGO_SETTINGS_MODULE": "loadtests.channels_ref.settings",
                   "CHANNELS_REDIS_URL": stack.redis.url.rsplit("/", 1)[0] + "/1"}
            proc = spawn(f"channels-{port}", [
                str(BIN / "uvicorn"), "loadtests.channels_ref.asgi:application", "--host",
                "127.0.0.1", "--port", str(port), "--workers", "2", "--no-access-log",
                "--http", args.http,
            ], env=env, log_dir=stack.log_dir)
            stack.procs.append(proc)
            import socket

            wait_until(lambda: socket.create_connection(("127.0.0.1", port), 1).close() or True,
                       timeout=60, what="channels server listening")
            results.append(asyncio.run(measure_system(
                CHANNELS_NAME, f"http://127.0.0.1:{port}/stream/", {},
                ["publish-channels"], args.clients, rates, args.seconds, env,
                args.client_processes)))
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
        stack.stop()
    ratios = {}
    channels = next((r for r in results if r["system"] == CHANNELS_NAME), None)
    if channels and channels["sustained_events_per_s"]:
        ratios = {r["system"]: r["sustained_events_per_s"] / channels["sustained_events_per_s"]
                  for r in results if r is not channels}
    path = save_json(args.name, {
        "clients": args.clients, "seconds": args.seconds, "cpus": os.cpu_count(),
        "burners": args.burners, "client_processes": args.client_processes, "http": args.http,
        "machine": "2 cores, shared with other engineers' test runs (loaded)",
        "bus_paths": args.bus, "sustained_ratio_over_channels": ratios, "results": results})
    png = plot(results, args.name, args.burners)
    print()
    for res in results:
        print(f"{res['system']}: {res['clients']} connections {res['per_worker']}, "
              f"sustained {res['sustained_events_per_s']:g} events/s")
        for p in res["phases"]:
            print(f"  {p['rate']:>5g} ev/s (offered {p['offered_per_s']:.1f}): "
                  f"delivered {p['delivered']}/{p['expected']} "
                  f"({p['delivered_per_s']:.0f}/s), latency p50 {p['p50_ms']:.1f} ms, "
                  f"p99 {p['p99_ms']:.1f} ms, max {p['max_ms']:.1f} ms, "
                  f"{p['server_cpu_us_per_delivery']:.1f} us CPU per delivery")
    print(f"\nwrote {path} and {png}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "fleet":
        asyncio.run(fleet_process(sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])))
    elif len(sys.argv) > 1 and sys.argv[1].startswith("publish-"):
        mode, rate, count = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
        (publish_product if mode == "publish-product" else publish_channels)(rate, count)
    else:
        main()
