"""Which usage counter is exact enough, and what it costs: database UPDATE, Redis INCR, or
per-process counts flushed periodically, through real uvicorn workers and real HTTP clients.

    .venv/bin/python loadtests/metering_counters.py [--rate 20] [--seconds 15]
        [--saturate-seconds 10] [--clients 8] [--web-workers 2] [--limit 50]

The rate. A customer site of 500 users, each making up to 100 metered API calls on a busy
day, is 50,000 calls a day; in an 8-hour working day that is 1.7 calls/s on average, and a
peak factor of 10 (scripts run at the start of the day, batch uploads) gives about 17/s. The
paced phase runs at --rate 20/s, above that peak; the saturation phase then runs --clients
closed-loop clients flat out to show the headroom each mechanism leaves.

For each backend (off = no metering, the baseline; database; redis; local) on a fresh stack:
1. paced: --rate submissions/s of POST /api/documents/ for --seconds, from --clients
   keep-alive sessions of 8 users spread over --web-workers uvicorn workers;
2. saturation: the same clients closed-loop for --saturate-seconds;
3. exactness: 202 answers vs the stored count, at once and after SIGKILL of the web
   workers (a crash or a hard deploy); then a fresh server with a --limit and one user hit
   by every client at once: how many got through;
4. the counter alone: microseconds per take in one process (the latency metering adds,
   without the HTTP noise around it).
Prints progress and a table, writes loadtests/results/metering_counters.{json,png}.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common import new_figure, progress, save_figure, save_json, summary  # noqa: E402
from tests.procs import Client, Stack, Web, make_template_db  # noqa: E402

BACKENDS = ("off", "database", "redis", "local")
USERS = 8
PASSWORD = "bench-password-1"
FLUSH_S = 2.0


@dataclass
class Tally:
    latencies_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, status: int, ms: float) -> None:
        with self.lock:
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if status == 202:
                self.latencies_ms.append(ms)

    @property
    def accepted(self) -> int:
        return self.statuses.get(202, 0)


def add_users(stack: Stack, names: list[str]) -> None:
    stack.manage("shell", "-c", (
        "from django.contrib.auth import get_user_model; U = get_user_model()\n"
        f"for n in {names!r}: U.objects.create_user(n, password={PASSWORD!r})"))


def submit(client: Client, tally: Tally, i: int) -> None:
    started = time.perf_counter()
    response = client.post("/api/documents/", json={"text": f"metered call {i}"})
    tally.record(response.status_code, (time.perf_counter() - started) * 1000)


def paced(clients: list[Client], *, rate: float, seconds: float) -> Tally:
    """Request i is due at start + i/rate; whichever client is free sends it."""
    tally, due, lock = Tally(), itertools.count(), threading.Lock()
    start = time.monotonic() + 0.2

    def run(client: Client) -> None:
        while True:
            with lock:
                i = next(due)
            at = start + i / rate
            if at - start >= seconds:
                return
            pause = at - time.monotonic()
            if pause > 0:
                time.sleep(pause)  # pacing the load, not synchronising with the server
            submit(client, tally, i)

    _in_threads(clients, run)
    return tally


def closed_loop(clients: list[Client], *, seconds: float) -> tuple[Tally, float]:
    tally, counter = Tally(), itertools.count()
    end = time.monotonic() + seconds

    def run(client: Client) -> None:
        while time.monotonic() < end:
            submit(client, tally, next(counter))

    started = time.monotonic()
    _in_threads(clients, run)
    return tally, time.monotonic() - started


def _in_threads(clients: list[Client], target: Any) -> None:
    threads = [threading.Thread(target=target, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def stored_total(stack: Stack, backend: str) -> int:
    """Read straight from the store, as an auditor would, not through the web workers."""
    if backend == "redis":
        client = stack.redis.client()
        keys = list(client.scan_iter(match="platform:metering:*"))
        return sum(int(v or 0) for v in client.mget(keys)) if keys else 0
    return int(stack.query("SELECT coalesce(sum(count), 0) FROM metering_usagecounter")[0][0])


def kill_web(web: Web) -> None:
    os.killpg(web.proc.pid, signal.SIGKILL)
    web.proc.wait_exit(timeout=30)


def overshoot(stack: Stack, backend: str, *, clients: int, limit: int, web_workers: int
              ) -> int:
    """One user, every client at once, 3 x limit calls: how many were let through."""
    add_users(stack, ["limited"])
    web = stack.start_web(workers=web_workers, METERING_BACKEND=backend,
                          METERING_DAILY_LIMIT=str(limit), METERING_FLUSH_S=str(FLUSH_S))
    sessions = [web.session("limited", PASSWORD) for _ in range(clients)]
    tally, due = Tally(), itertools.count()

    def run(client: Client) -> None:
        while (i := next(due)) < 3 * limit:
            submit(client, tally, i)

    _in_threads(sessions, run)
    web.proc.stop()
    return tally.accepted


def take_cost_us(stack: Stack, backend: str, *, calls: int = 2000) -> float:
    """The counter alone, in one process against the stack's SQLite file and Redis: the part
    of a request's latency that metering adds, without the HTTP noise around it."""
    script = (
        "import time\n"
        "from django.contrib.auth import get_user_model\n"
        "from apps.metering.backends import counters\n"
        "from apps.metering.days import today_utc\n"
        f"c, uid, day = counters({backend!r}), get_user_model().objects.get(username='user0').pk, "
        "today_utc()\n"
        "c.take(user_id=uid, day=day, limit=10**9)\n"
        "t = time.perf_counter()\n"
        f"for _ in range({calls}): c.take(user_id=uid, day=day, limit=10**9)\n"
        f"print('take_us', (time.perf_counter() - t) / {calls} * 1e6)\n")
    out = stack.manage("shell", "-c", script, METERING_BACKEND=backend).stdout
    line = next(w for w in out.splitlines() if w.startswith("take_us"))
    return round(float(line.split()[1]), 1)


def bench_backend(backend: str, template: Path, work: Path, args: argparse.Namespace
                  ) -> dict[str, Any]:
    stack = Stack(base_dir=work / backend, template_db=template, env_overrides={
        "METERING_BACKEND": backend, "METERING_DAILY_LIMIT": str(10**9),
        "METERING_FLUSH_S": str(FLUSH_S)})
    try:
        users = [f"user{i}" for i in range(USERS)]
        add_users(stack, users)
        web = stack.start_web(workers=args.web_workers)
        clients = [web.session(users[i % USERS], PASSWORD) for i in range(args.clients)]
        progress(f"{backend}: paced, {args.rate}/s for {args.seconds} s")
        slow = paced(clients, rate=args.rate, seconds=args.seconds)
        progress(f"{backend}: saturation, {args.clients} clients for {args.saturate_seconds} s")
        fast, elapsed = closed_loop(clients, seconds=args.saturate_seconds)
        sent = slow.accepted + fast.accepted
        stored_now = stored_total(stack, backend)
        kill_web(web)
        stored_after_kill = stored_total(stack, backend)
        progress(f"{backend}: {sent} accepted, {stored_now} stored at once, "
                 f"{stored_after_kill} after SIGKILL of the web workers")
        let_through = overshoot(stack, backend, clients=args.clients, limit=args.limit,
                                web_workers=args.web_workers)
        progress(f"{backend}: limit {args.limit}, {let_through} let through")
        take_us = take_cost_us(stack, backend)  # last: it adds counts of its own
        progress(f"{backend}: {take_us} µs per take, in process")
    finally:
        stack.stop()
    return {
        "backend": backend,
        "paced": {"rate": args.rate, "statuses": slow.statuses, **summary(slow.latencies_ms)},
        "saturation": {"statuses": fast.statuses, "per_s": round(fast.accepted / elapsed, 1),
                       **summary(fast.latencies_ms)},
        "accepted": sent,
        "stored_at_once": stored_now,
        "lost_at_once": sent - stored_now if backend != "off" else None,
        "stored_after_kill": stored_after_kill,
        "lost_after_kill": sent - stored_after_kill if backend != "off" else None,
        "limit": args.limit,
        "let_through": let_through,
        "over_limit": let_through - args.limit if backend != "off" else None,
        "take_us": take_us,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=20.0, help="paced submissions per second")
    parser.add_argument("--seconds", type=float, default=15.0, help="paced phase length")
    parser.add_argument("--saturate-seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=8, help="concurrent HTTP sessions")
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--limit", type=int, default=50, help="daily limit for the overshoot test")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="metering-"))
    template = make_template_db(work / "template")
    rows = [bench_backend(b, template, work, args) for b in args.backends.split(",")]

    base = next((r["paced"]["p50"] for r in rows if r["backend"] == "off"), None)
    print(f"\n{'backend':<10}{'take µs':>9}{'p50 ms':>8}{'p99 ms':>8}{'+p50 ms':>9}{'max/s':>8}"
          f"{'accepted':>10}{'lost':>6}{'lost@kill':>11}{'over limit':>12}")
    for r in rows:
        added = f"{r['paced']['p50'] - base:+.2f}" if base is not None else "-"
        print(f"{r['backend']:<10}{r['take_us']:>9}{r['paced']['p50']:>8.2f}"
              f"{r['paced']['p99']:>8.2f}{added:>9}"
              f"{r['saturation']['per_s']:>8}{r['accepted']:>10}{_n(r['lost_at_once']):>6}"
              f"{_n(r['lost_after_kill']):>11}{_n(r['over_limit']):>12}")
    info = {"cores": os.cpu_count(), "args": vars(args), "flush_s": FLUSH_S, "rows": rows}
    print(f"\nwrote {save_json('metering_counters', info)}")

    fig, (left, mid, right) = new_figure(
        f"Usage counters through {args.web_workers} uvicorn workers", ncols=3)
    names = [r["backend"] for r in rows]
    left.bar(names, [r["paced"]["p50"] for r in rows], color="#457b9d", label="p50")
    left.bar(names, [r["paced"]["p99"] - r["paced"]["p50"] for r in rows],
             bottom=[r["paced"]["p50"] for r in rows], color="#a8dadc", label="p99")
    left.set_ylabel(f"submit latency at {args.rate:g}/s (ms)")
    left.legend()
    mid.bar(names, [r["saturation"]["per_s"] for r in rows], color="#e76f51")
    mid.axhline(args.rate, color="#1d3557", linestyle="--", label="paced rate")
    mid.set_ylabel(f"submissions/s, {args.clients} clients flat out")
    mid.legend()
    right.bar(names, [r["lost_after_kill"] or 0 for r in rows], color="#e63946",
              label="lost at SIGKILL")
    right.bar(names, [r["over_limit"] or 0 for r in rows], color="#f4a261", alpha=0.7,
              label=f"let through past limit {args.limit}")
    right.set_ylabel("calls")
    right.legend()
    print(f"wrote {save_figure(fig, 'metering_counters')}")


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


if __name__ == "__main__":
    main()
