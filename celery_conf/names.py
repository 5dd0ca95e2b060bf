"""Every queue and every task the platform runs, declared once, by stable name.

Workers consume the queues listed in ``platform/supervisord.conf``; a test keeps the two in
step. Task names never change once shipped: a renamed task strands messages already queued.
"""

from __future__ import annotations

from enum import StrEnum


class Queue(StrEnum):
    DEFAULT = "default"
    DOCUMENTS = "documents"
    REPORTS = "reports"


# Task names, as the apps' decorators and the schedule tables spell them.
DOCUMENT_PROCESS = "documents.process"

# Which queue each task goes to. A task missing here falls back to Queue.DEFAULT, and a test
# fails so it cannot happen by accident.
TASK_QUEUES: dict[str, Queue] = {
    DOCUMENT_PROCESS: Queue.DOCUMENTS,
}


def task_routes() -> dict[str, dict[str, str]]:
    return {name: {"queue": str(queue)} for name, queue in TASK_QUEUES.items()}
