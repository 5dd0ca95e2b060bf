"""The declared classification of in-process state: what coordination each piece needs.

Types only; the entries for this project live in ``apps/state_registry.py``, beside the apps.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Coordination(StrEnum):
    NONE = "none"
    ELECT_ONCE = "elect exactly once"
    DURABLE_QUEUE = "durable queue"
    BROADCAST = "broadcast"
    SHARED_COUNTER = "shared counter"
    LOCAL_STREAM = "local stream"


@dataclass(frozen=True)
class Classified:
    path: str
    symbol: str
    coordination: Coordination
    mechanism: str  # what serves it; for NONE, why no coordination is right

    @property
    def key(self) -> tuple[str, str]:
        return (self.path, self.symbol)
