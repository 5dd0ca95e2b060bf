"""What one telemetry sample holds: a simulated device's reading and the serving process's load.

Everything here belongs to one connection (a ``Sampler`` per stream); nothing is shared
between connections or processes, which is why the stream needs no coordination (ADR 10).
"""

from __future__ import annotations

import math
import os
import random
import time
from dataclasses import dataclass

# The simulated device: a slow sine (a 10 s period, so a 10 s chart window shows one cycle)
# plus a faster ripple and gaussian noise; deterministic for a given seed apart from timing.
PERIOD_S = 10.0
RIPPLE_PERIOD_S = 1.3
NOISE_SD = 0.08
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Sample:
    seq: int
    t: float  # seconds since the stream started
    value: float  # the device's reading, about -1.3 .. 1.3
    cpu: float  # percent of one core used by this web worker since the previous sample
    rss_mb: float

    def as_dict(self) -> dict[str, float | int]:
        return {"seq": self.seq, "t": round(self.t, 4), "value": round(self.value, 4),
                "cpu": round(self.cpu, 1), "rss_mb": round(self.rss_mb, 1)}


def _rss_mb() -> float:
    # /proc/self/statm: the second field is resident pages; cheaper than psutil per sample.
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE_SIZE / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0


class Sampler:
    """One connection's source of samples; call ``sample()`` at the stream's rate."""

    def __init__(self, *, seed: int | None = None) -> None:
        self._random = random.Random(seed)
        self._phase = self._random.uniform(0, 2 * math.pi)
        self._started = time.monotonic()
        self._seq = 0
        self._last_wall = self._started
        self._last_cpu = self._cpu_s()

    @staticmethod
    def _cpu_s() -> float:
        times = os.times()
        return times.user + times.system

    def sample(self) -> Sample:
        now = time.monotonic()
        t = now - self._started
        value = (math.sin(2 * math.pi * t / PERIOD_S + self._phase)
                 + 0.25 * math.sin(2 * math.pi * t / RIPPLE_PERIOD_S)
                 + self._random.gauss(0, NOISE_SD))
        cpu_now = self._cpu_s()
        wall = now - self._last_wall
        cpu = 100 * (cpu_now - self._last_cpu) / wall if wall > 0 else 0.0
        self._last_wall, self._last_cpu = now, cpu_now
        self._seq += 1
        return Sample(seq=self._seq, t=t, value=value, cpu=cpu, rss_mb=_rss_mb())
