"""How a document task's outcome reaches Celery: task states that mean what they say.

A failed document is FAILURE (``DocumentFailed``); a copy whose run lost its claim while it
ran (its worker was taken for dead, and the recovery handed the document on) is rejected
(``ClaimSuperseded``, Celery's public ``Reject``, not requeued): the run holding the claim
decides. Every outcome acknowledges its message as usual; since redelivery goes through the
database (adr/0030), no ack can strand another copy's work.
"""

from __future__ import annotations

from celery.exceptions import Reject


class DocumentFailed(Exception):
    """The document was committed failed (the reason is on the row): a FAILURE task state.

    Not in the task's ``autoretry_for``, so it is not retried; acks_late still acks it.
    """


class ClaimSuperseded(Reject):
    """This copy's run lost the document's claim to a later run; its result was dropped."""

    # ``requeue`` is accepted only so the exception unpickles: a prefork pool process sends
    # it to the worker's main process pickled, rebuilt as ``cls(*args)`` = (reason, False).
    # Without it the main process died of a TypeError on every dropped late result (found
    # by tests/partitions/test_worker_cut.py: a worker host healed after a cut).
    def __init__(self, reason: str, requeue: bool = False) -> None:
        super().__init__(reason, requeue=False)
