"""Loaded (as ``sitecustomize``) only by processes a test starts with a skewed clock.

libfaketime 0.9.10 (Debian 12) fakes the wall clock well, but with
``FAKETIME_DONT_FAKE_MONOTONIC=1`` its ``clock_nanosleep`` answers ``EINVAL`` to the absolute
monotonic deadline Python's ``time.sleep`` asks for, and without that option threads' timed
waits hang. So ``time.sleep`` waits on an event instead (a relative timed wait, which works):
the test tool's defect worked around, nothing of the platform changed.
"""

from __future__ import annotations

import threading
import time


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    threading.Event().wait(seconds)


time.sleep = _sleep
