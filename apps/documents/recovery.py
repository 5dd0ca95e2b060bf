"""The database is the record: documents with no live work behind them go back in the queue.

Two kinds, both found at a cost that does not grow with the backlog (adr/0030):

- **abandoned**: processing, but every run of it belongs to a process that is gone (its
  worker's heartbeat expired, restarted under a new pid, or no longer lists the pool process).
  Read from the running runs (an index on the outcome) and the workers' heartbeat keys.
- **orphaned**: queued, but its message is in no queue: lost between a worker's BRPOP and
  kombu's write to ``unacked``, in an AOF tail a power cut threw away, by a retry whose publish
  failed, or fetched by a worker that died before it claimed. Every message carries the time it
  was queued; the queue's oldest waiting message (the older of its two ends,
  celery_conf/queues.py) is a watermark: a document queued more than the grace period before
  it was consumed already, so if it is still queued and no retry countdown holds it, nothing
  will run it.

Each is put back ahead of the queue's backlog (the recovery priority step, as kombu's own
restore put a message back at the consuming end) with its generation counted up, in a
compare-and-set on the row's (state, generation, starts) as the pass read them, which every
claim moves (a takeover of a dead run keeps the state and the generation but counts a start),
so two passes, or a pass and a claim, cannot both act; any older copy of its message that
turns up later is skipped by the claim. The leading beat runs
``documents_recover_duty`` every second (scheduler/duties.py); the reconciler's periodic run
calls ``documents_recover`` too.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError
from redis.exceptions import RedisError

from celery_conf import names
from celery_conf.connections import redis_client
from celery_conf.liveness import run_alive, worker_heartbeats
from celery_conf.policy import RECOVERY_PRIORITY
from celery_conf.queues import oldest_queued_at

from .models import Document, DocumentRun
from .services import document_announce, document_enqueue

logger = logging.getLogger(__name__)

State = Document.State
Outcome = DocumentRun.Outcome
QUEUE = str(names.TASK_QUEUES[names.DOCUMENT_PROCESS])


@dataclass(frozen=True)
class Recovered:
    abandoned: list[int] = field(default_factory=list)  # processing, its process dead
    orphaned: list[int] = field(default_factory=list)  # queued, no message behind it
    took_s: float = 0.0

    @property
    def requeued(self) -> list[int]:
        return sorted(self.abandoned + self.orphaned)


def documents_recover(*, grace_s: float | None = None) -> Recovered:
    """Re-enqueue every abandoned or orphaned document; returns which.

    ``grace_s`` (default DOCUMENTS_RECONCILE_AFTER_S) is how long a document must have been
    queued before the watermark passed it: longer than a publish can take after its commit.
    Raises redis or database errors: nothing is re-enqueued on a guess.
    """
    started = time.monotonic()
    grace = settings.DOCUMENTS_RECONCILE_AFTER_S if grace_s is None else grace_s
    client = redis_client()
    abandoned = [doc for doc, generation, starts in _abandoned(client, grace)
                 if _requeue(doc, state=State.PROCESSING, generation=generation, starts=starts,
                             why="its worker died: re-enqueued by the recovery")]
    orphaned = [doc for doc, generation, starts in _orphaned(client, grace)
                if _requeue(doc, state=State.QUEUED, generation=generation, starts=starts,
                            why="its message was lost: re-enqueued by the recovery")]
    result = Recovered(abandoned=abandoned, orphaned=orphaned,
                       took_s=time.monotonic() - started)
    if result.requeued:
        logger.warning("documents: re-enqueued %d document(s): abandoned %s, orphaned %s "
                       "(%.3f s)", len(result.requeued), abandoned[:20], orphaned[:20],
                       result.took_s)
    return result


def documents_recover_duty() -> str | None:
    """The leading beat's duty (scheduler/duties.py): one pass, a line when it acted."""
    result = documents_recover()
    if not result.requeued:
        return None
    return (f"re-enqueued abandoned {result.abandoned[:20]} orphaned {result.orphaned[:20]} "
            f"in {result.took_s * 1000:.1f} ms")


def _abandoned(client, grace: float) -> list[tuple[int, int, int]]:  # type: ignore[no-untyped-def]
    """(document, generation, starts) for each processing document whose runs' processes are
    gone."""
    now = timezone.now()
    oldest_live = now - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)
    runs = DocumentRun.objects.filter(outcome=Outcome.RUNNING,
                                      document__state=State.PROCESSING).values_list(
        "document_id", "document__generation", "document__starts", "worker", "worker_pid", "pid",
        "started_at")
    by_document: dict[tuple[int, int, int], list[tuple[str, int | None, int, float]]] = (
        defaultdict(list))
    for doc, generation, starts, worker, worker_pid, pid, started_at in runs:
        if started_at > oldest_live:  # no run outlives the hard time limit
            by_document[(doc, generation, starts)].append((worker, worker_pid, pid,
                                                           started_at.timestamp()))
        else:
            by_document.setdefault((doc, generation, starts), [])
    # Processing with no running run at all cannot come from one transaction; a row left so
    # by hand is judged after the grace period.
    stuck = Document.objects.filter(
        state=State.PROCESSING, updated_at__lt=now - timedelta(seconds=grace)).exclude(
        runs__outcome=Outcome.RUNNING).values_list("pk", "generation", "starts")
    for key in stuck:
        by_document.setdefault(key, [])
    if not by_document:
        return []
    beats = worker_heartbeats(client)
    dead = [key for key, held in by_document.items()
            if not any(run_alive(beats.get(worker), worker_pid=worker_pid, pool_pid=pid,
                                 since=since) for worker, worker_pid, pid, since in held)]
    if dead and _redis_just_started(client):
        return []
    return sorted(dead)


def _redis_just_started(client) -> bool:  # type: ignore[no-untyped-def]
    """A Redis up for less than a heartbeat's lifetime cannot tell a dead worker from one that
    has not written since the restart (its keys may have expired while Redis was down)."""
    ttl = float(settings.CELERY_PLATFORM_HEARTBEAT_TTL)
    uptime = int(client.info("server").get("uptime_in_seconds", 0))
    if uptime < ttl + settings.CELERY_PLATFORM_HEARTBEAT_INTERVAL:
        logger.info("documents: Redis started %s s ago; recovery waits for the workers' "
                    "heartbeats", uptime)
        return True
    return False


def _orphaned(client, grace: float) -> list[tuple[int, int, int]]:  # type: ignore[no-untyped-def]
    """(document, generation, starts) for each queued document whose message no queue holds."""
    waiting, head = oldest_queued_at(client, QUEUE)
    now = timezone.now()
    if waiting and head is None:
        return []  # messages from before the stamps existed: no watermark yet
    horizon = now if head is None else min(now, timezone.datetime.fromtimestamp(
        head, tz=timezone.get_current_timezone()))
    cutoff = horizon - timedelta(seconds=grace)
    return list(Document.objects.filter(state=State.QUEUED, updated_at__lt=cutoff).filter(
        Q(retry_at__isnull=True) | Q(retry_at__lt=now - timedelta(seconds=grace)))
        .order_by("pk").values_list("pk", "generation", "starts"))


def _requeue(document_id: int, *, state: str, generation: int, starts: int, why: str) -> bool:
    now = timezone.now()
    with transaction.atomic():
        # Unchanged since this pass looked: a run that claimed it meanwhile wins. A copy that
        # took over from the dead run counted a start and left state and generation as they
        # were: without ``starts`` here the pass would supersede that live run.
        moved = Document.objects.filter(pk=document_id, state=state, generation=generation,
                                        starts=starts).update(
            state=State.QUEUED, claim_token=None, generation=generation + 1, retry_at=None,
            updated_at=now)
        if not moved:
            return False
        DocumentRun.objects.filter(document_id=document_id, outcome=Outcome.RUNNING).update(
            outcome=Outcome.SUPERSEDED, finished_at=now, detail=why)
        document_announce(document_id=document_id, state=State.QUEUED)
    try:
        # Ahead of the backlog: it waited its turn once already (celery_conf/policy.py).
        document_enqueue(document_id=document_id, generation=generation + 1,
                         priority=RECOVERY_PRIORITY)
    except (KombuOperationalError, RedisError, OSError) as exc:
        # Queued in the database with no message: the next pass finds it an orphan.
        logger.warning("documents: could not re-enqueue %s: %s", document_id, exc)
        return False
    return True
