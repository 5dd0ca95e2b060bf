"""The history checker (tests/history.py) on hand-made histories: each violation it exists
to find is found, and a clean history passes."""

from __future__ import annotations

import pytest

from scheduler.fence import JournalEntry
from tests.history import History, Op, check, journal_history

SLOT = "reports.usage_rollup|2026-12-05T06:00:{:02d}+00:00"


def clean() -> History:
    h = History()
    for doc in ("1", "2"):
        h.add("acked", doc, host="client", at=1.0)
        h.add("kept", doc)
        h.add("started", doc, host="worker1@hostB", at=2.0)
        h.add("done", doc, host="worker1@hostB", at=3.0)
        h.add("effect", doc, what="email=a@example.com")
    h.add("refused", "request-3", host="client")
    for second in (0, 1, 2):
        h.add("fired", SLOT.format(second), host="beat-a")
        h.add("ran", SLOT.format(second), host="beat-a")
    h.add("owned", "beat lease", host="beat-a", at=0.0, end=10.0)
    h.add("owned", "beat lease", host="beat-b", at=10.5, end=20.0)
    return h


def test_a_clean_history_passes() -> None:
    verdict = check(clean(), every={"reports.usage_rollup": 1})
    verdict.assert_ok()
    assert verdict.counts()["acknowledged"] == 2 and verdict.done == 2


@pytest.mark.parametrize(("name", "spoil", "violation"), [
    ("acknowledged, never run", lambda h: (h.add("acked", "9"), h.add("kept", "9")), "lost"),
    ("acknowledged, run, never finished",
     lambda h: (h.add("acked", "9"), h.add("kept", "9"), h.add("started", "9")), "stuck"),
    ("two results kept", lambda h: h.add("done", "1", host="worker1@hostC"), "doubled"),
    ("a slot's work run twice", lambda h: h.add("ran", SLOT.format(1), host="beat-b"),
     "doubled"),
    ("an effect twice", lambda h: h.add("effect", "2", what="email=a@example.com"),
     "effects_twice"),
    ("a 202 whose row is gone", lambda h: (h.add("acked", "7"), h.add("done", "7")),
     "ack_not_kept"),
    ("a refused request kept", lambda h: h.add("kept", "request-3"), "refused_but_kept"),
    ("a slot published twice",
     lambda h: h.add("fired", SLOT.format(2), host="beat-b", at=15.0),
     "fired_twice"),
    ("a slot skipped", lambda h: h.add("fired", SLOT.format(5), host="beat-a"), "missed"),
    ("a publish after a newer election",
     lambda h: h.add("fired", SLOT.format(3), host="beat-a", at=12.0), "stale_publish"),
    ("two owners at once",
     lambda h: h.add("owned", "beat lease", host="beat-c", at=9.0, end=11.0), "two_owners"),
])
def test_each_violation_fails_the_history(name: str, spoil: object, violation: str) -> None:
    history = clean()
    spoil(history)  # type: ignore[operator]
    verdict = check(history, every={"reports.usage_rollup": 1})
    assert set(verdict.violations) == {violation}, (name, verdict.violations)
    with pytest.raises(AssertionError, match=violation):
        verdict.assert_ok()


def test_a_late_result_dropped_by_the_fence_is_not_a_double() -> None:
    history = clean()
    history.add("started", "1", host="worker1@hostC")
    history.add("dropped", "1", host="worker1@hostB")
    verdict = check(history)
    verdict.assert_ok()
    assert verdict.dropped == 1


def test_the_journal_gives_publishes_and_lease_spans() -> None:
    entries = [
        JournalEntry("elected", "a", 0.0, "-", 0.0),
        JournalEntry("fired", "a", 1.0, SLOT.format(1), 1.0),
        JournalEntry("renewed", "a", 2.0, "-", 2.0),
        JournalEntry("elected", "b", 20.0, "-", 20.0),
        JournalEntry("fired", "b", 21.0, SLOT.format(1), 21.0),  # the same slot again
    ]
    history = History()
    journal_history(entries, history, jobs=["reports.usage_rollup"])
    verdict = check(history)
    assert verdict.fired_twice == [SLOT.format(1)] and not verdict.two_owners
    # A new election inside the old holder's lease: two owners.
    entries.insert(3, JournalEntry("elected", "c", 3.0, "-", 3.0))
    history = History()
    journal_history(entries, history, jobs=["reports.usage_rollup"])
    assert check(history).two_owners


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown operation kind"):
        Op("finished", "1")


def test_a_slot_published_and_never_run_is_counted_not_failed() -> None:
    history = clean()
    history.add("fired", SLOT.format(3), host="beat-b", at=15.0)  # expired unrun
    verdict = check(history, every={"reports.usage_rollup": 1})
    verdict.assert_ok()
    assert verdict.unrun == [SLOT.format(3)] and verdict.counts()["unrun"] == 1
