"""The beat's outbox: a fire is decided inside the fence, and published afterwards.

A fire is one fenced script (scheduler/fence.py): the entry's last run (compare-and-set) and an
outbox item naming the task, its arguments, the slot and a task id derived from (job, slot)
land together, or not at all, and only while the lock holds the leader's token. Publishing the
item is then Celery's public ``send_task`` (adr/0031), followed by removing the item. Whoever
leads publishes every item in the outbox each tick, its own and any a previous leader left, so
a leader that died between the fire and the publish loses no slot.

The price of publishing outside the script: a leader that lost its lock while its publish was
already on the wire can land that message after the next leader published the same item. Both
messages carry the same task id, slot and ``fired_by``; the reports' run record, unique per
(job, slot), runs the slot once and counts the second delivery (``duplicates``). The journal's
``fired`` lines, the decisions, stay exactly one per slot.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from .settings import KEY_PREFIX

OUTBOX_KEY = f"{KEY_PREFIX}:outbox"
# Task ids are uuid5 in this namespace of "<job>|<slot>": the same slot always has the same id,
# whichever beat publishes it and however often.
_SLOT_IDS = uuid.UUID("7b6c3a52-0d1e-4c59-9a53-2f8f2b1e6d10")


def slot_task_id(job: str, slot: str) -> str:
    return str(uuid.uuid5(_SLOT_IDS, f"{job}|{slot}"))


@dataclass(frozen=True)
class OutboxItem:
    """One decided fire, waiting to be published. Serialized with keys of its own (never
    ``task``), so a test's network fault can tell the fire script from the publish."""

    job: str
    task_name: str
    slot: str
    fired_by: str
    task_id: str
    fired_at: float  # the leader's clock when it decided
    expires_s: float  # how long the message may wait in the queue once published
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)

    def dumps(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def loads(cls, raw: str) -> OutboxItem:
        return cls(**json.loads(raw))
