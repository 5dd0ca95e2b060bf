"""``manage.py status`` prints epoch times with their zone and seconds with units; ``--json``
keeps the numbers."""

from __future__ import annotations

import time

from apps.ops.management.commands.status import render


def test_times_and_durations_are_printed_as_people_read_them():
    now = time.time()
    text = render({"beat": {"leader": "beat1@h:7", "since": now - 200, "leading_for_s": 200.0,
                            "lock_expires_in_s": 4.6, "lock_expires_at": now + 30.2,
                            "lock_key": "platform:beat::lock"},
                   "inflight": {"messages": 0, "oldest_lease_age_s": None}})
    lines = dict(line.split(None, 1) for line in text.splitlines() if line.startswith("  "))
    assert lines["since"].endswith("UTC (3 min 20 s ago)"), lines["since"]
    assert lines["lock_expires_at"].endswith("UTC (in 30 s)"), lines["lock_expires_at"]
    assert lines["leading_for_s"] == "3 min 20 s"
    assert lines["lock_expires_in_s"] == "4.6 s"
    assert lines["oldest_lease_age_s"] == "none"
    assert "1796" not in text  # no epoch seconds
