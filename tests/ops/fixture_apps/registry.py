"""Classifies the stateful fixture app, except USAGE (left out on purpose) plus one stale entry."""

from apps.ops.audit.registry import Classified
from apps.ops.audit.registry import Coordination as C

P = "stateful/state.py"
REGISTRY = [
    Classified(P, "SUBSCRIBERS", C.BROADCAST, "event bus"),
    Classified(P, "PENDING", C.DURABLE_QUEUE, "Celery"),
    Classified(P, "RECENT", C.NONE, "recent items per process, for display"),
    Classified(P, "_client", C.NONE, "a connection pool per process"),
    Classified(P, "refresher", C.ELECT_ONCE, "RedBeat"),
    Classified(P, "<module>:Thread", C.ELECT_ONCE, "RedBeat"),
    Classified(P, "Registry.handlers", C.NONE, "filled at import, identical everywhere"),
    Classified(P, "lookup", C.NONE, "pure function of its argument"),
    Classified("stateful/apps.py", "ready:Thread", C.ELECT_ONCE, "RedBeat"),
    Classified("stateful/apps.py", "ready:scheduler", C.ELECT_ONCE, "RedBeat"),
    Classified(P, "ticker", C.LOCAL_STREAM, "per connection"),
    Classified(P, "GONE", C.NONE, "state that was removed"),
]
