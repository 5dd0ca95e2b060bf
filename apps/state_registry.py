"""Every piece of in-process state in the project, with the coordination it needs.

``manage.py check`` fails when the scanner finds state missing here, or an entry here whose
state is gone (apps/ops/checks.py). ``manage.py audit_state`` prints the table, and
``manage.py audit_state --write-adr adr/0009-enforce-the-state-audit-with-a-system-check.md``
regenerates the ADR's copy (a test keeps the two equal).
"""

from __future__ import annotations

from apps.ops.audit.registry import Classified
from apps.ops.audit.registry import Coordination as C

CONSTANT = "a table filled at import and never mutated: identical in every process"

REGISTRY: list[Classified] = [
    # --- platform plumbing ----------------------------------------------------------------
    Classified("celery_conf/names.py", "TASK_QUEUES", C.NONE, CONSTANT),
    Classified("celery_conf/connections.py", "redis_client", C.NONE,
               "one redis-py connection pool per process: a resource, not data; "
               "redis-py resets it after fork"),
    Classified("celery_conf/heartbeat.py", "_in_pool_process", C.NONE,
               "whether this process is a worker's pool child, set once as it starts: a fact "
               "about the process itself, true in each pool process by nature"),
    Classified("celery_conf/connections.py", "async_subscriber", C.NONE,
               "the hub's pub/sub connection while one subscription lasts: a resource, not "
               "data; closed on leaving with its connections to the sentinels"),
    Classified("celery_conf/versions.py", "VERIFIED", C.NONE, CONSTANT),
    Classified("apps/ops/status.py", "SECTIONS", C.NONE, CONSTANT),
    Classified("apps/ops/management/commands/audit_state.py", "RENDER", C.NONE, CONSTANT),
    Classified("apps/state_registry.py", "REGISTRY", C.NONE, CONSTANT),
    # --- reports: periodic jobs ---------------------------------------------------------
    Classified("scheduler/tables.py", "TABLES", C.ELECT_ONCE,
               "schedule definitions; only the RedBeat leader turns them into runs, and the "
               "(job, slot) run record fences each slot"),
    Classified("scheduler/tables.py", "JOBS", C.NONE, CONSTANT),
    Classified("apps/reports/services.py", "WORK", C.NONE, CONSTANT),
    Classified("apps/reports/tasks.py", "RETRY", C.NONE, CONSTANT),
    Classified("apps/reports/tasks.py", "TASKS", C.NONE, CONSTANT),
    # --- notifications: the event bus ---------------------------------------------------
    Classified("apps/events/hub.py", "_hub", C.BROADCAST,
               "this web worker's one Redis pub/sub subscription and its local SSE "
               "connections; the replay log in Redis covers gaps"),
    Classified("apps/events/hub.py", "_hub_loop", C.NONE,
               "the event loop the hub is bound to: per process by nature"),
    Classified("apps/events/hub.py", "_log_client", C.NONE,
               "an async Redis connection pool per process: a resource, not data"),
    Classified("apps/events/stream.py", "event_stream", C.BROADCAST,
               "one browser's stream: attached to this worker's hub (one subscription per "
               "process), replayed from the Redis log after Last-Event-ID on reconnect"),
    Classified("apps/events/stream.py", "session_watch", C.BROADCAST,
               "one connection's watch for its session's end: a subscriber on the hub that "
               "hears only the control channel's session ends (adr/0018, adr/0019)"),
    Classified("apps/events/stream.py", "live", C.BROADCAST,
               "the live part of event_stream: this connection's bounded backlog, fed by the hub"),
    Classified("apps/stream_wire.py", "VERIFIED", C.NONE, CONSTANT),
    Classified("apps/stream_wire.py", "CYCLES", C.NONE, CONSTANT),
    Classified("apps/stream_wire.py", "verified", C.NONE,
               "whether the installed uvicorn and HTTP parser are the releases the fast path "
               "was verified on: the same answer in every process of one installation"),
    Classified("apps/session_store.py", "_select", C.NONE,
               "the session lookup's SQL text, built once from the model's table and column "
               "names: the same text in every process"),
    Classified("apps/stream_front.py", "_auth_pool", C.NONE,
               "a fixed pool of threads per web worker that authenticate new streams: a "
               "resource, not data; each call closes its database connection"),
    Classified("apps/events/replay.py", "log_after", C.NONE,
               "pages through the Redis replay log for one reconnecting client; holds a "
               "cursor only for the duration of the read"),
    # --- telemetry: high-frequency live stream ---------------------------------------------
    Classified("apps/telemetry/stream.py", "telemetry_stream", C.LOCAL_STREAM,
               "sampled per connection in the web worker that serves it; deliberately not on "
               "the bus (adr/0010); any number of web workers serve it unchanged"),
    Classified("apps/telemetry/streams.py", "_watched", C.LOCAL_STREAM,
               "wraps one telemetry stream to keep this worker's count of open streams and to "
               "end it with its session (a session watch on the hub; samples stay off the bus)"),
    Classified("apps/telemetry/streams.py", "_open", C.NONE,
               "the telemetry streams this worker serves now: the cap is per worker by "
               "design (each stream costs this worker's CPU), so nothing is shared"),
    Classified("apps/telemetry/streams.py", "_open_per_user", C.NONE,
               "the same count per user, for the per-user cap beside the per-worker one: a "
               "bound on one worker's CPU, so per worker too (a user reaches at most "
               "TELEMETRY_STREAMS_PER_USER on each worker)"),
    # --- metering: per-user daily usage ----------------------------------------------------
    Classified("apps/metering/backends.py", "counters", C.SHARED_COUNTER,
               "the counts live in one database row per user and day, taken with one atomic "
               "conditional UPDATE (adr/0011); this memoises the per-process handle. Only the "
               "benchmark's METERING_BACKEND=local keeps counts in it, measured to lose them"),
]
