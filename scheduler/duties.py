"""Work only the leading beat does, every second, beside the schedule: the leader's duties.

The duties are named in the app's config (``platform_leader_duties``, from
``settings.PLATFORM_LEADER_DUTIES``) by dotted path, so the scheduler imports no app: the
documents' recovery (apps/documents/recovery.py) is one. They run on a thread of their own,
never inside ``tick()``, so a slow database cannot hold up the lock's renewal; each pass
runs only while the lease is valid. A duty must be safe to run twice at once (a leader frozen
past its lease may run one last pass beside its successor): the recovery's compare-and-set
on each row is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from django.db import connections
from django.utils.module_loading import import_string

logger = logging.getLogger("celery.beat")
# A duty that keeps failing logs at most once per this many seconds.
ERROR_LOG_EVERY_S = 60.0

Duty = Callable[[], str | None]


class LeaderDuties:
    def __init__(self, paths: Sequence[str], *, interval: float,
                 leading: Callable[[], bool]) -> None:
        self.duties: list[tuple[str, Duty]] = [(path, import_string(path)) for path in paths]
        self.interval = interval
        self.leading = leading
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None
        self._last_error: dict[str, float] = {}
        self.passes = 0

    def start(self) -> None:
        if self.thread is None and self.duties:
            self.thread = threading.Thread(target=self._run, daemon=True,
                                           name="leader-duties")
            self.thread.start()

    def stop(self) -> None:
        self.stopped.set()

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            if self.leading():
                self.run_once()

    def run_once(self) -> None:
        for path, duty in self.duties:
            if not self.leading():
                return
            try:
                line = duty()
            except Exception as exc:  # noqa: BLE001 - a duty's failure must not stop the others
                connections.close_all()  # a broken connection is opened afresh next pass
                now = time.monotonic()
                if now - self._last_error.get(path, -ERROR_LOG_EVERY_S) >= ERROR_LOG_EVERY_S:
                    self._last_error[path] = now
                    logger.warning("beat: leader duty %s failed: %s: %s", path,
                                   type(exc).__name__, exc)
                continue
            if line:
                logger.info("beat: %s: %s", path.rsplit(".", 1)[-1], line)
        self.passes += 1
