"""The work-seconds canary: an operator's long document, capped; pure logic, no processes."""

from __future__ import annotations

import time

from apps.documents import processing
from apps.documents.processing import WORK_SECONDS_CANARY, process_text


def test_a_canary_line_sets_the_work_time() -> None:
    started = time.monotonic()
    result = process_text("A long one.\n#!canary:work-seconds=0.3\n", work_seconds=0)
    assert time.monotonic() - started >= 0.3
    assert result.word_count > 0


def test_the_canary_must_be_a_line_of_its_own_and_is_capped(monkeypatch) -> None:
    assert WORK_SECONDS_CANARY.search("text #!canary:work-seconds=5") is None
    assert WORK_SECONDS_CANARY.search("#!canary:work-seconds=-5") is None
    asked: list[float] = []
    monkeypatch.setattr(processing, "_simulate_work", asked.append)
    process_text("Capped.\n#!canary:work-seconds=999\n", work_seconds=1)
    process_text("No canary here.", work_seconds=1)
    assert asked == [processing.MAX_CANARY_WORK_SECONDS, 1]
