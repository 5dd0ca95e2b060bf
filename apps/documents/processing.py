"""The processing itself: parse, extract simple facts, summarise. Deterministic and offline."""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, field

WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")
EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b")
URL = re.compile(r"\bhttps?://[^\s<>\"']+")
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?(?![\w.])")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
STOPWORDS = frozenset(
    "a an and are as at be but by for from has have he her his i in is it its of on or our "
    "she so that the their them there they this to was we were what when which who will with "
    "you your".split()
)
# A document whose text holds this line fails with a transient error on every attempt: an
# operator's canary for the retry and failure path on a live site (docs/using/pages.md).
TRANSIENT_FAILURE_CANARY = "#!canary:transient-failure"
# A document whose text holds the line "#!canary:work-seconds=N" takes N seconds of simulated
# work instead of DOCUMENTS_PROCESSING_SECONDS: an operator's canary for long documents
# (longer than the visibility timeout, across deploys), used by loadtests/chaos_soak.py. Capped
# well below the soft time limit so no submission can hold a pool process for long.
WORK_SECONDS_CANARY = re.compile(r"^#!canary:work-seconds=(\d{1,3}(?:\.\d{1,3})?)[ \t]*\r?$",
                                 re.MULTILINE)
MAX_CANARY_WORK_SECONDS = 120.0
MAX_FACTS_PER_KIND = 10
SUMMARY_SENTENCES = 2


class TransientProcessingError(Exception):
    """Worth retrying: the same input may succeed later."""


class PermanentProcessingError(Exception):
    """Not worth retrying: the input itself cannot be processed."""


@dataclass(frozen=True)
class ProcessingResult:
    summary: str
    word_count: int
    facts: list[tuple[str, str]] = field(default_factory=list)


def process_text(text: str, *, work_seconds: float = 0.0) -> ProcessingResult:
    """Parse, extract and summarise ``text``; ``work_seconds`` simulates the heavy part."""
    if TRANSIENT_FAILURE_CANARY in text:
        raise TransientProcessingError("canary document: transient failure requested")
    words = WORD.findall(text)
    if not words:
        raise PermanentProcessingError("the document contains no words to process")
    if canary := WORK_SECONDS_CANARY.search(text):
        work_seconds = min(float(canary.group(1)), MAX_CANARY_WORK_SECONDS)
    _simulate_work(work_seconds)
    facts: list[tuple[str, str]] = []
    for kind, pattern in (("email", EMAIL), ("url", URL), ("number", NUMBER)):
        facts += [(kind, v[:255]) for v in _unique(pattern.findall(text))[:MAX_FACTS_PER_KIND]]
    counts = Counter(w.lower() for w in words if w.lower() not in STOPWORDS)
    facts += [("keyword", w) for w, _ in counts.most_common(5)]
    return ProcessingResult(summary=_summarise(text), word_count=len(words), facts=facts)


def _summarise(text: str) -> str:
    sentences = [s.strip() for s in SENTENCE_END.split(" ".join(text.split())) if s.strip()]
    summary = " ".join(sentences[:SUMMARY_SENTENCES])
    return summary if len(summary) <= 500 else summary[:497] + "..."


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _simulate_work(seconds: float) -> None:
    # Sleep in short slices so the soft time limit's exception lands promptly.
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.2))
