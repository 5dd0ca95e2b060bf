"""Times, durations and sizes as people read them: one wording for every command and page.

Times carry their zone (the process's, which Django sets from TIME_ZONE, UTC as shipped) and
how far away they are; sizes use the binary units the forms state. Shared plumbing: imports
nothing of the apps, so any of them may use it.
"""

from __future__ import annotations

import time
from datetime import datetime


def duration_text(seconds: float) -> str:
    """``0.4 s``, ``9.8 s``, ``1 s``, ``3 min 20 s``, ``2 h 5 min``, ``3 d 4 h``: two units
    at most."""
    seconds = abs(seconds)
    if seconds < 60:
        tenths = f"{seconds:.1f}"
        if seconds < 10 and not tenths.endswith(".0"):
            return f"{tenths} s"
        return f"{seconds:.0f} s"
    whole = round(seconds)
    for unit, size, smaller, smaller_size in (("d", 86400, "h", 3600), ("h", 3600, "min", 60),
                                              ("min", 60, "s", 1)):
        if whole >= size:
            big, rest = divmod(whole, size)
            rest //= smaller_size
            return f"{big} {unit}" + (f" {rest} {smaller}" if rest else "")
    return f"{whole} s"  # unreachable: every whole >= 60 matched above


def time_text(when: float | datetime | None, *, now: float | None = None,
              relative: bool = True, milliseconds: bool = False) -> str:
    """``2026-12-03 15:49:27 UTC (9.8 s ago)``; ``(in 4.6 s)`` for a time still to come;
    without the part in brackets when ``relative`` is false; ``15:49:27.042`` with
    ``milliseconds`` (a journal of writes a second apart)."""
    if when is None:
        return "unknown"
    stamp = when.timestamp() if isinstance(when, datetime) else float(when)
    local = datetime.fromtimestamp(stamp).astimezone()
    clock = f"{local:%Y-%m-%d %H:%M:%S}" + (f".{local.microsecond // 1000:03d}" if milliseconds
                                             else "")
    if not relative:
        return f"{clock} {local:%Z}"
    ahead = stamp - (time.time() if now is None else now)
    relative = f"in {duration_text(ahead)}" if ahead > 0 else f"{duration_text(ahead)} ago"
    return f"{clock} {local:%Z} ({relative})"


def size_text(size: int) -> str:
    """``900 bytes``, ``64 KiB``, ``1 MiB``, ``1.06 MiB``: the unit the forms and errors share."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.2f}".rstrip("0").rstrip(".") + f" {unit}"
    return f"{size} bytes"
