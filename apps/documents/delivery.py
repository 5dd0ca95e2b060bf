"""How a document task's outcome reaches Celery: task states that mean what they say, and an
acknowledgement that never removes another copy's lease.

A restored message keeps its delivery tag, so two copies of one message (the original still
running on a worker in warm shutdown, the restored one elsewhere) share one entry in kombu's
``unacked`` hash and ``unacked_index``. kombu's ack deletes that entry whoever sends it. A copy
whose run lost its claim therefore raises ``ClaimSuperseded``; ``DocumentRequest`` (the task's
Request class, in the worker's main process) then drops the message from the worker's own
bookkeeping without touching Redis, so the lease stays with the copy that holds the claim
(adr/0012). Every other outcome is acknowledged as usual.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.exceptions import Ignore
from celery.worker.request import Request
from celery.worker.state import task_ready
from kombu.transport.virtual import QoS as VirtualQoS

logger = logging.getLogger(__name__)


class DocumentFailed(Exception):
    """The document was committed failed (the reason is on the row): a FAILURE task state.

    Not in the task's ``autoretry_for``, so it is not retried; acks_late still acks it.
    """


class ClaimSuperseded(Ignore):
    """This copy's run lost the document's claim to a later run; its result was dropped."""


class DocumentRequest(Request):
    """The worker-side request of a document task: a superseded copy leaves Redis alone."""

    def on_failure(self, exc_info: Any, send_failed_event: bool = True,
                   return_ok: bool = False) -> Any:
        exc = getattr(exc_info, "exception", None)
        exc = getattr(exc, "exc", exc)  # unwrap ExceptionWithTraceback
        if isinstance(exc, ClaimSuperseded):
            task_ready(self)
            self._release_locally()
            # Flower and the event stream show it as REJECTED: this delivery was dropped.
            self.send_event("task-rejected", requeue=False)
            logger.warning("document task %s: superseded copy (%s); its lease is left to "
                           "the copy holding the claim", self.id, exc)
            return None
        return super().on_failure(exc_info, send_failed_event=send_failed_event,
                                  return_ok=return_ok)

    def _release_locally(self) -> None:
        """Forget the message in this worker (prefetch slot, lease renewal), not in Redis."""
        if self.acknowledged:
            return
        message = self._message
        channel = getattr(message, "channel", None)
        qos = getattr(channel, "qos", None)
        if qos is not None:
            # The virtual transport's ack: local bookkeeping only. The Redis transport's own
            # ack (QoS.ack) would also ZREM/HDEL the shared tag.
            VirtualQoS.ack(qos, message.delivery_tag)
            message._state = "ACK"
        self.acknowledged = True
