"""Streams spread over uvicorn's web workers, for tests that need one on each.

uvicorn's workers share one listening socket and the kernel hands each connection to one of
them, not evenly: whichever worker accepts first wins, and on a busy machine one worker can
take connection after connection (measured: in CI once 16 in a row; with three busy loops
beside the test, up to 30; why one is favoured was not measured). So this keeps connecting,
reads the pid each stream announces, keeps ``per_worker`` on each worker and closes the
others at once, so the favoured worker is not loaded with streams nobody reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tests.procs import wait_until

S = TypeVar("S")


def spread_over_workers(open_stream: Callable[[int], S], *, served_by: Callable[[S], int | None],
                        stop: Callable[[S], None], per_worker: int = 1, workers: int = 2,
                        most: int = 200, what: str = "stream") -> list[S]:
    """``open_stream(n)`` (n: how many are kept so far) until ``per_worker`` streams are kept
    on each of ``workers`` workers; ``served_by`` is the serving worker's pid once the stream
    is ready, else None. Raises after ``most`` connections, closing what it kept."""
    kept: list[S] = []
    counts: dict[int, int] = {}
    for _ in range(most):
        stream = open_stream(len(kept))
        pid = wait_until(lambda s=stream: served_by(s), timeout=30, interval=0.02,
                         what=f"{what} ready")
        if counts.get(pid, 0) >= per_worker:
            stop(stream)
            continue
        kept.append(stream)
        counts[pid] = counts.get(pid, 0) + 1
        if len(counts) >= workers and all(n >= per_worker for n in counts.values()):
            return kept
    for stream in kept:
        stop(stream)
    raise AssertionError(f"{what}s landed on {counts} after {most} connections")
