"""A periodic job: its task, its slot grid and what happens to slots no beat fired.

Slots sit on a fixed grid, ``offset + k * every`` seconds after the epoch (UTC), not "every N
seconds since the last run": so every beat, whichever fires it and however late, names the
same slot the same way, and the slot is the key of the run record that fences doubles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

# A message that waited this long in the queue is still worth running, however short the
# interval: a busy worker's pick-up latency must not turn into a skipped slot.
MIN_EXPIRES_SECONDS = 5.0


class Missed(StrEnum):
    """What the next run does about slots that no beat fired (none was alive, or leading)."""

    # The next run covers every slot since the last one that finished: one run, not a replay.
    CATCH_UP = "catch_up"
    # The next run covers its own slot only; the missed slots' work is simply not done.
    SKIP = "skip"


@dataclass(frozen=True)
class PeriodicJob:
    name: str  # the stable task name (celery_conf/names.py); also the schedule entry's name
    every: int  # seconds between slots
    offset: int  # seconds past the grid boundary, to stagger jobs; reduced modulo ``every``
    missed: Missed
    max_late: int  # seconds a fired message may wait before a worker drops it unrun
    why: str  # one line for ``manage.py periodic_jobs`` and the reports page

    def __post_init__(self) -> None:
        if self.every <= 0:
            raise ValueError(f"{self.name}: every must be positive, got {self.every}")

    @property
    def phase(self) -> int:
        return self.offset % self.every

    @property
    def expires(self) -> float:
        # Never later than the next slot (that run supersedes this one), never so short that
        # an ordinary queueing delay expires it.
        return max(MIN_EXPIRES_SECONDS, min(float(self.max_late), 0.9 * self.every))

    def slot_index(self, when: datetime) -> int:
        return math.floor((when.timestamp() - self.phase) / self.every)

    def slot_start(self, index: int) -> datetime:
        return datetime.fromtimestamp(index * self.every + self.phase, tz=UTC)

    def slot_at(self, when: datetime) -> datetime:
        """The start of the slot that contains ``when``."""
        return self.slot_start(self.slot_index(when))

    def next_slot(self, when: datetime) -> datetime:
        return self.slot_start(self.slot_index(when) + 1)

    @property
    def period(self) -> timedelta:
        return timedelta(seconds=self.every)
