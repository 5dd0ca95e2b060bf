"""Counts what happened to submitted documents: completed, lost, run twice, effects doubled."""

from __future__ import annotations

from dataclasses import dataclass

from apps.documents.processing import process_text
from tests.procs import Stack


@dataclass(frozen=True)
class Tally:
    submitted: int
    completed: int
    failed: int
    lost: int  # neither done nor failed
    doubled: int  # documents with more than one result (done runs or a second set of facts)
    extra_starts: int  # starts beyond the first: redeliveries and retries

    def as_dict(self) -> dict[str, int]:
        return self.__dict__.copy()


def tally(stack: Stack, ids: list[int]) -> Tally:
    marks = ",".join("?" * len(ids))
    docs = stack.query(
        f"SELECT id, state, starts, content FROM documents_document WHERE id IN ({marks})", *ids
    )
    done_runs = dict(stack.query(
        f"SELECT document_id, COUNT(*) FROM documents_documentrun "
        f"WHERE outcome = 'done' AND document_id IN ({marks}) GROUP BY document_id", *ids))
    facts = dict(stack.query(
        f"SELECT document_id, COUNT(*) FROM documents_documentfact "
        f"WHERE document_id IN ({marks}) GROUP BY document_id", *ids))
    doubled = 0
    for doc in docs:
        if doc["state"] != "done":
            continue
        expected = len(process_text(doc["content"]).facts)
        if done_runs.get(doc["id"], 0) != 1 or facts.get(doc["id"], 0) != expected:
            doubled += 1
    states = [doc["state"] for doc in docs]
    return Tally(
        submitted=len(ids),
        completed=states.count("done"),
        failed=states.count("failed"),
        lost=len(ids) - states.count("done") - states.count("failed"),
        doubled=doubled,
        extra_starts=sum(max(doc["starts"] - 1, 0) for doc in docs),
    )


def all_finished(stack: Stack, ids: list[int]) -> bool:
    t = tally(stack, ids)
    return t.completed + t.failed == t.submitted


def sample_text(n: int) -> str:
    return (
        f"Report number {n}. Contact ops{n}@example.com or see https://example.com/r/{n}. "
        f"The quarterly volume rose to {100 + n} units. Everyone agreed the rollout went well."
    )
