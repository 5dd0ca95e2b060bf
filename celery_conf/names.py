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
# Periodic jobs of the reports system (scheduler/tables.py fires them by these names).
REPORTS_USAGE_ROLLUP = "reports.usage_rollup"
REPORTS_DAILY_DIGEST = "reports.daily_digest"
REPORTS_RETENTION_PURGE = "reports.retention_purge"
# The reconciler (run by the elected beat): re-enqueues documents with no live work behind
# them and marks periodic runs whose process died.
PLATFORM_RECONCILE = "platform.reconcile"

# Which queue each task goes to. A task missing here falls back to Queue.DEFAULT, and a test
# fails so it cannot happen by accident.
TASK_QUEUES: dict[str, Queue] = {
    DOCUMENT_PROCESS: Queue.DOCUMENTS,
    REPORTS_USAGE_ROLLUP: Queue.REPORTS,
    REPORTS_DAILY_DIGEST: Queue.REPORTS,
    REPORTS_RETENTION_PURGE: Queue.REPORTS,
    # Not the documents queue: a backlog there must not delay the job that repairs it.
    PLATFORM_RECONCILE: Queue.REPORTS,
}


def task_routes() -> dict[str, dict[str, str]]:
    return {name: {"queue": str(queue)} for name, queue in TASK_QUEUES.items()}
