"""What routing the telemetry stream through the event bus would cost, against sampling it per
connection: Redis messages per second and CPU of redis-server, the web workers and a producer.

    .venv/bin/python loadtests/telemetry_bus_cost.py [--clients 1,10,100] [--rate 25]
        [--seconds 8] [--web-workers 2]

One stack (redis-server with the platform's config, appendfsync always; uvicorn with
--web-workers workers) serves three ways of getting --rate samples/s to each of N browsers:

- per-connection (what ships): each stream samples in the web worker that serves it
  (GET /api/telemetry/stream/); Redis is not involved.
- bus, a stream per client: a producer process samples for each of N users and publishes every
  sample through the real bus (apps.events.bus: XADD to the replay log + PUBLISH, pipelined
  per tick); each user's browser reads the real notifications stream, where every web worker
  receives every sample and forwards the user's own.
- bus, one shared stream: the producer publishes one stream to everyone (user_id None), the
  cheapest possible use of the bus, though it cannot carry per-connection data.

For each, CPU seconds (user + system, psutil) of each process over --seconds, Redis commands
and PUBLISHes per second (INFO), samples/s the clients received. Prints progress and a table,
writes loadtests/results/telemetry_bus_cost.{json,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402

from apps.events.bus import CHANNEL  # noqa: E402
from loadtests.common import new_figure, progress, save_figure, save_json  # noqa: E402
from tests.procs import ROOT, Stack, Web, make_template_db, wait_until  # noqa: E402
from tests.telemetry.reader import StreamReader  # noqa: E402

MODES = ("per-connection", "bus-per-client", "bus-shared")
KIND = "telemetry.sample"
LOG_MAXLEN = 10_000  # the bus's default replay log length (EVENTS_LOG_MAXLEN)


def make_viewers(stack: Stack, n: int) -> list[tuple[int, str]]:
    """n users with a logged-in session each (no password hashing: fast for 100 users)."""
    script = (
        "from django.contrib.auth import get_user_model, SESSION_KEY, BACKEND_SESSION_KEY, "
        "HASH_SESSION_KEY\n"
        "from django.contrib.sessions.backends.db import SessionStore\n"
        f"for i in range({n}):\n"
        "    u = get_user_model()(username=f'viewer{i}'); u.set_unusable_password(); u.save()\n"
        "    s = SessionStore(); s[SESSION_KEY] = str(u.pk)\n"
        "    s[BACKEND_SESSION_KEY] = 'django.contrib.auth.backends.ModelBackend'\n"
        "    s[HASH_SESSION_KEY] = u.get_session_auth_hash(); s.create()\n"
        "    print('viewer', u.pk, s.session_key)\n")
    lines = [line.split() for line in stack.manage("shell", "-c", script).stdout.splitlines()]
    return [(int(w[1]), f"sessionid={w[2]}") for w in lines if w and w[0] == "viewer"]


def produce(user_ids: list[int | None], rate: float) -> None:
    """The bus's producer: one sample per user per tick, published with the bus's own script
    (XADD to the replay log, trim, PUBLISH), pipelined per tick so one producer keeps up."""
    import django

    django.setup()
    from django.conf import settings

    from apps.events.bus import _PUBLISH_LUA, CHANNEL, LOG_KEY
    from apps.events.types import encode_body
    from apps.telemetry.sampling import Sampler
    from celery_conf.connections import redis_client

    client = redis_client()
    script = client.register_script(_PUBLISH_LUA)
    samplers = [Sampler() for _ in user_ids]
    period, next_tick = 1.0 / rate, time.monotonic()
    while True:
        pipe = client.pipeline(transaction=False)
        for user_id, sampler in zip(user_ids, samplers, strict=True):
            body = encode_body(kind=KIND, user_id=user_id, time=time.time(),
                               data=sampler.sample().as_dict())
            script(keys=[LOG_KEY], client=pipe, args=[
                settings.EVENTS_LOG_MAXLEN, settings.EVENTS_LOG_MAX_AGE_S, body, CHANNEL])
        pipe.execute()
        next_tick += period
        pause = next_tick - time.monotonic()
        if pause > 0:
            time.sleep(pause)  # the producer's clock, as in apps/telemetry/stream.py
        elif -pause > period:
            next_tick = time.monotonic()


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            out[pid] = t.user + t.system
        except psutil.NoSuchProcess:
            out[pid] = 0.0
    return out


def redis_counters(stack: Stack) -> dict[str, int]:
    client = stack.redis.client()
    stats, cmds = client.info("stats"), client.info("commandstats")
    return {"commands": int(stats["total_commands_processed"]),
            "publish": int(cmds.get("cmdstat_publish", {}).get("calls", 0)),
            "net_out": int(stats["total_net_output_bytes"]),
            "aof": int(client.info("persistence").get("aof_current_size", 0))}


def run_mode(stack: Stack, web: Web, viewers: list[tuple[int, str]], *, mode: str, n: int,
             rate: float, seconds: float) -> dict[str, Any]:
    producer = None
    if mode != "per-connection":
        ids = [uid for uid, _ in viewers[:n]] if mode == "bus-per-client" else [None]
        producer = subprocess.Popen(
            [sys.executable, __file__, "--produce", json.dumps(ids), "--rate", str(rate)],
            cwd=ROOT, env=stack.env, stdout=subprocess.DEVNULL,
            stderr=open(stack.log_dir / f"producer-{mode}-{n}.log", "wb"))
    path, marker = ("/api/telemetry/stream/", b"event: sample\n") if producer is None else (
        "/api/notifications/stream/", f"event: {KIND}\n".encode())
    if producer is None:
        path += f"?rate={rate:g}"
    readers = [StreamReader(web.base, cookie, path=path, marker=marker).start()
               for _, cookie in viewers[:n]]
    try:
        def receiving() -> bool:
            if producer is not None and producer.poll() is not None:
                log = (stack.log_dir / f"producer-{mode}-{n}.log").read_text()
                raise RuntimeError(f"producer exited:\n{log[-3000:]}")
            return all(r.arrivals for r in readers)

        wait_until(receiving, timeout=90, what=f"{mode}: all {n} clients receiving")
        time.sleep(1.0)  # settle after the connection burst; measuring, not synchronising
        web_pids = [p.pid for p in psutil.Process(web.proc.pid).children(recursive=True)]
        assert stack.redis.proc is not None
        pids = {"redis": [stack.redis.proc.pid], "web": web_pids,
                "producer": [producer.pid] if producer else []}
        cpu0 = {k: cpu_seconds(v) for k, v in pids.items()}
        r0, t0 = redis_counters(stack), time.monotonic()
        time.sleep(seconds)  # the measuring window
        cpu1 = {k: cpu_seconds(v) for k, v in pids.items()}
        r1, t1 = redis_counters(stack), time.monotonic()
        window = t1 - t0
        received = sum(r.count_between(t0, t1) for r in readers)
        subscribers = int(stack.redis.client().pubsub_numsub(CHANNEL)[0][1])
    finally:
        for r in readers:
            r.stop()
        if producer is not None:
            producer.terminate()
            producer.wait(timeout=30)
    cpu = {k: round(100 * sum(cpu1[k][p] - cpu0[k][p] for p in cpu1[k]) / window, 1)
           for k in pids}
    publish_per_s = (r1["publish"] - r0["publish"]) / window
    return {
        "mode": mode, "clients": n, "rate": rate, "window_s": round(window, 2),
        "samples_expected_per_s": n * rate,
        "samples_received_per_s": round(received / window, 1),
        "redis_publish_per_s": round(publish_per_s, 1),
        # Every web worker's subscription receives every message.
        "bus_subscribers": subscribers,
        "redis_deliveries_per_s": round(publish_per_s * subscribers, 1),
        "redis_commands_per_s": round((r1["commands"] - r0["commands"]) / window, 1),
        "redis_out_kib_per_s": round((r1["net_out"] - r0["net_out"]) / window / 1024, 1),
        # appendfsync always: every sample is also an fsynced append to the AOF.
        "aof_growth_kib_per_s": round((r1["aof"] - r0["aof"]) / window / 1024, 1),
        "cpu_percent": cpu,
        "cpu_added_percent": round(sum(cpu.values()), 1),
        # How far back the replay log still reaches for real notifications at this rate.
        "replay_log_span_s": round(LOG_MAXLEN / publish_per_s, 1) if publish_per_s else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,10,100", help="comma-separated client counts")
    parser.add_argument("--rate", type=float, default=25.0, help="samples per second per stream")
    parser.add_argument("--seconds", type=float, default=8.0, help="measuring window per run")
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--produce", help=argparse.SUPPRESS)  # internal: the producer process
    args = parser.parse_args()
    if args.produce:
        produce(json.loads(args.produce), args.rate)
        return
    counts = [int(c) for c in args.clients.split(",")]
    work = Path(tempfile.mkdtemp(prefix="telemetry-bus-"))
    stack = Stack(base_dir=work / "stack", template_db=make_template_db(work / "template"),
                  env_overrides={"TELEMETRY_RATE_HZ": str(args.rate),
                                 "TELEMETRY_STREAMS_PER_USER": str(max(counts) + 1)})
    rows = []
    try:
        viewers = make_viewers(stack, max(counts))
        web = stack.start_web(workers=args.web_workers)
        for n in counts:
            for mode in MODES:
                progress(f"{mode}: {n} clients at {args.rate:g}/s")
                row = run_mode(stack, web, viewers, mode=mode, n=n, rate=args.rate,
                               seconds=args.seconds)
                progress(f"  received {row['samples_received_per_s']}/s, publish "
                         f"{row['redis_publish_per_s']}/s, cpu {row['cpu_percent']}")
                rows.append(row)
    finally:
        stack.stop()

    print(f"\n{'mode':<16}{'N':>5}{'recv/s':>9}{'pub/s':>8}{'deliv/s':>9}{'cmd/s':>8}"
          f"{'redis%':>8}{'web%':>7}{'prod%':>7}{'total%':>8}{'AOF KiB/s':>11}{'log span s':>12}")
    for r in rows:
        c = r["cpu_percent"]
        span = "-" if r["replay_log_span_s"] is None else f"{r['replay_log_span_s']:g}"
        print(f"{r['mode']:<16}{r['clients']:>5}{r['samples_received_per_s']:>9}"
              f"{r['redis_publish_per_s']:>8}{r['redis_deliveries_per_s']:>9}"
              f"{r['redis_commands_per_s']:>8}{c['redis']:>8}{c['web']:>7}{c['producer']:>7}"
              f"{r['cpu_added_percent']:>8}{r['aof_growth_kib_per_s']:>11}{span:>12}")
    info = {"cores": os.cpu_count(), "args": {k: v for k, v in vars(args).items()
                                              if k != "produce"}, "rows": rows}
    print(f"\nwrote {save_json('telemetry_bus_cost', info)}")

    fig, (left, right) = new_figure(
        f"Telemetry at {args.rate:g} samples/s per client, {args.web_workers} web workers", ncols=2)
    colors = {"per-connection": "#2a9d8f", "bus-per-client": "#e63946", "bus-shared": "#f4a261"}
    for mode in MODES:
        mine = [r for r in rows if r["mode"] == mode]
        xs = [r["clients"] for r in mine]
        left.plot(xs, [r["redis_publish_per_s"] + r["redis_deliveries_per_s"] for r in mine],
                  marker="o", color=colors[mode], label=mode)
        right.plot(xs, [r["cpu_added_percent"] for r in mine], marker="o", color=colors[mode],
                   label=mode)
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xlabel("clients")
        ax.legend()
    left.set_ylabel("Redis messages/s (published + delivered)")
    right.set_ylabel("CPU, % of one core (redis + web + producer)")
    print(f"wrote {save_figure(fig, 'telemetry_bus_cost')}")


if __name__ == "__main__":
    main()
