"""The durable-task policy: the Celery settings every task gets unless it opts out.

``config.settings`` calls ``durable_task_settings`` and stores the result under the ``CELERY_``
namespace; the Celery app reads them from there. Each value that differs from Celery's
default says why. Reference: https://docs.celeryq.dev/en/stable/userguide/configuration.html
"""

from __future__ import annotations

from typing import Any

from kombu import Queue as KombuQueue

from .names import Queue, task_routes

# Every timing below is written once, here, and reaches kombu (broker_transport_options), the
# worker heartbeat (celery_conf/heartbeat.py, through the app's config:
# ``platform_heartbeat_interval``, ``platform_heartbeat_ttl``) and the recovery of documents
# (apps/documents/recovery.py reads the TTL) from these defaults or from the arguments
# config/settings/base.py passes. platform/supervisord.conf's worker stop timeout must exceed
# the hard time limit; tests/celery_conf/test_policy.py checks it.

# Redelivery after a worker dies goes through the database, not through kombu's lease
# (adr/0030): the leading beat re-enqueues a document whose claim holder's heartbeat is gone,
# within seconds. kombu's visibility timeout is only the backstop for a message whose holder
# died before any database record, so it is set above anything a *live* worker can hold a
# message for: the hard time limit plus the longest retry countdown (an ETA message waits in
# the worker that fetched it), with a margin. A shorter one restores messages that are still
# running (celery#2481, #3270, #7009). Celery's default is 3600.
DEFAULT_VISIBILITY_TIMEOUT = 900
# A task's retry waits at most this long (every task's retry_backoff_max; apps/*/tasks.py).
MAX_RETRY_COUNTDOWN = 300
# How often each worker sweeps for messages past the visibility timeout. kombu's default sweep
# is every 100 s (interval 10 x throttle 10); with the long timeout the sweep is cheap, and a
# short period keeps the backstop at timeout + 5 s.
DEFAULT_RESTORE_SWEEP_INTERVAL = 5
# Messages one sweep restores at most: kombu 5.7's default (None) is every one past the
# timeout in one pass, under the restore lock. Ten keeps each hold to milliseconds; the next
# sweep takes the next ten (adr/0012).
RESTORE_LIMIT = 10
# Expiry of kombu's ``unacked_mutex``, the lock every worker's sweep takes for 1-12 ms. A worker
# killed while holding it blocks every sweep until it expires: kombu's default of 300 s turned
# a 35 s redelivery into 5 minutes. Far above the longest hold; two sweeps overlapping after an
# early expiry are harmless (each restore is a WATCHed transaction on the ``unacked`` hash).
DEFAULT_UNACKED_MUTEX_EXPIRE = 5
# kombu keeps a queue as one Redis list per priority step (Celery's Redis guide, "Message
# Priorities": ``celery``, ``celery:5``, ...; with Redis the lower number is served first, and
# a worker's BRPOP names every queue's step-0 list before any step-5 one). Two steps: every
# message goes out at DEFAULT_PRIORITY (``task_default_priority``), and the recovery puts a
# document whose worker died back at RECOVERY_PRIORITY, ahead of the backlog, as kombu's own
# restore did (adr/0030, amendment 2026-12-03). The documented transport options below state
# the layout, and apps/ops and the recovery read it from here (celery_conf/queues.py), never a
# copy of kombu's defaults.
RECOVERY_PRIORITY = 0
DEFAULT_PRIORITY = 5
PRIORITY_STEPS = (RECOVERY_PRIORITY, DEFAULT_PRIORITY)
PRIORITY_SEP = ":"
UNACKED_KEY = "unacked"
UNACKED_INDEX_KEY = "unacked_index"

# Task time limits: the soft one raises inside the task so it can record its failure; the hard
# one kills the pool process. supervisord waits longer than the hard one on a deploy.
DEFAULT_SOFT_TIME_LIMIT = 300
DEFAULT_TIME_LIMIT = 360
# Every worker writes its heartbeat this often (a thread of its main process, running through
# warm shutdowns), with a TTL of this many intervals: the worker is dead when the key is gone.
# Five missed writes in a row before a live worker is taken for dead; a dead one is noticed
# within the TTL, which is most of the redelivery time after a SIGKILL (adr/0030).
DEFAULT_HEARTBEAT_INTERVAL = 1.0
HEARTBEAT_INTERVALS_PER_TTL = 5
# A cold shutdown (SIGQUIT, or a second SIGTERM) first waits this long for running tasks,
# then terminates them; their messages go back to the queue at once (kombu restores a
# closing channel's unacked messages) and their documents are taken over by the next delivery.
SOFT_SHUTDOWN_TIMEOUT = 10.0


def durable_task_settings(
    *,
    broker_url: str,
    visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT,
    heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
    restore_sweep_interval: int = DEFAULT_RESTORE_SWEEP_INTERVAL,
    unacked_mutex_expire: int = DEFAULT_UNACKED_MUTEX_EXPIRE,
    soft_time_limit: int = DEFAULT_SOFT_TIME_LIMIT,
    time_limit: int = DEFAULT_TIME_LIMIT,
    broker_options: dict[str, Any] | None = None,
    broker_use_ssl: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Celery settings, keyed with the ``CELERY_`` prefix for Django's settings module.

    ``broker_options`` and ``broker_use_ssl`` say how to reach Redis (Sentinel, TLS, the
    health check): ``celery_conf.connections.broker_connection_options`` derives them.
    Raises ValueError when the timings contradict each other; nothing is half-applied.
    """
    if min(visibility_timeout, heartbeat_interval, restore_sweep_interval,
           unacked_mutex_expire, soft_time_limit, time_limit) <= 0:
        raise ValueError("every timing of the durable-task policy must be positive")
    if soft_time_limit >= time_limit:
        raise ValueError("soft_time_limit must be below time_limit")
    if visibility_timeout <= time_limit + MAX_RETRY_COUNTDOWN:
        raise ValueError(
            f"visibility_timeout ({visibility_timeout} s) must exceed the hard time limit plus "
            f"the longest retry countdown ({time_limit} + {MAX_RETRY_COUNTDOWN} s): a shorter "
            "one redelivers messages that live workers still run")
    if unacked_mutex_expire >= visibility_timeout:
        raise ValueError(
            f"unacked_mutex_expire ({unacked_mutex_expire} s) must stay below the visibility "
            f"timeout ({visibility_timeout} s)")
    settings: dict[str, Any] = {
        # https://docs.celeryq.dev/en/stable/userguide/configuration.html#broker-url
        "broker_url": broker_url,
        # Keep retrying the broker at start-up: under the supervisor, Redis may start later.
        "broker_connection_retry_on_startup": True,
        # https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/redis.html#visibility-timeout
        "broker_transport_options": {
            # The backstop for a message no database record covers (see above).
            "visibility_timeout": visibility_timeout,
            # Sweep every few seconds instead of every 100 s, ten messages at a time.
            "unacked_restore_interval": restore_sweep_interval,
            "unacked_restore_throttle": 1,
            "unacked_restore_limit": RESTORE_LIMIT,
            # A worker killed while holding the sweep's lock delays every sweep this long.
            "unacked_mutex_expire": unacked_mutex_expire,
            # The layout the platform reads (celery_conf/queues.py), stated, not assumed.
            "priority_steps": PRIORITY_STEPS,
            "sep": PRIORITY_SEP,
            "unacked_key": UNACKED_KEY,
            "unacked_index_key": UNACKED_INDEX_KEY,
            "socket_keepalive": True,
            # Where Redis is and how to reach it (celery_conf/connections.py).
            **(broker_options or {}),
        },
        # TLS to Redis, certificates verified (None: plain TCP).
        "broker_use_ssl": broker_use_ssl,
        # --- durability -----------------------------------------------------------------
        # Ack after the task finishes, so a worker that dies mid-task does not lose it.
        "task_acks_late": True,
        # A pool child killed (SIGKILL, OOM) requeues its message instead of acking it.
        "task_reject_on_worker_lost": True,
        # One message per pool process: nothing waits on a busy worker while another idles.
        "worker_prefetch_multiplier": 1,
        # Redis only: fetch a message only when a pool process is free to run it.
        "worker_disable_prefetch": True,
        # A broker connection loss cancels running acks_late tasks, which are redelivered,
        # rather than letting them finish with an ack that can no longer be sent
        # (Celery 6's default; 5.x warns without it).
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        # --- messages -------------------------------------------------------------------
        # JSON only: a pickled message is refused at decode and never executed.
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "event_serializer": "json",
        # --- limits ---------------------------------------------------------------------
        # No task may hold a worker forever; the soft limit lets it record its failure.
        "task_soft_time_limit": soft_time_limit,
        "task_time_limit": time_limit,
        # A deploy's SIGTERM is a warm shutdown (running tasks finish); a cold one waits this
        # long first (https://docs.celeryq.dev/en/stable/userguide/workers.html#soft-shutdown).
        "worker_soft_shutdown_timeout": SOFT_SHUTDOWN_TIMEOUT,
        # Read by celery_conf/heartbeat.py: how often a worker says it is alive, and how long
        # the key outlives the last write.
        "platform_heartbeat_interval": heartbeat_interval,
        "platform_heartbeat_ttl": heartbeat_interval * HEARTBEAT_INTERVALS_PER_TTL,
        # State lives on the rows the tasks update; no result backend to grow or to lose.
        "task_ignore_result": True,
        # One backend object per app, not per thread (Celery's documented switch). Under ASGI
        # every request's sync code runs in a thread of its own, and apply_async builds the
        # backend for its result object in each new thread: 5 % of a submit's Python (issue
        # 20's profile). Without a result backend it holds nothing a thread could race on.
        "result_backend_thread_safe": True,
        # --- routing --------------------------------------------------------------------
        "task_default_queue": str(Queue.DEFAULT),
        "task_queues": tuple(KombuQueue(str(q), routing_key=str(q)) for q in Queue),
        # Each route carries the default priority step (Celery's routing options), so whatever
        # sends a task, apply_async or send_task by name (the beat's outbox, a manual run),
        # publishes to the same list; the recovery's explicit priority overrides it.
        "task_routes": {name: {**route, "priority": DEFAULT_PRIORITY}
                        for name, route in task_routes().items()},
        # The same step for a task's own apply_async (the routes above say it for send_task).
        "task_default_priority": DEFAULT_PRIORITY,
        # An unknown queue name in a route is a bug, not a reason to invent a queue.
        "task_create_missing_queues": False,
        # --- monitoring -----------------------------------------------------------------
        # Task events off (Celery's default): they halved no-op throughput (adr/0014).
        # Flower switches them on in every worker while it runs (its enable_events control
        # command, re-sent every 5 s), so its task views fill while someone watches. A site
        # that wants them always on starts its workers with -E.
        "worker_send_task_events": False,
        "task_send_sent_event": False,
    }
    return {f"CELERY_{key.upper()}": value for key, value in settings.items()}


def queue_lists(queue: str, *, steps: tuple[int, ...] = PRIORITY_STEPS, sep: str = PRIORITY_SEP,
                prefix: str = "") -> list[str]:
    """The Redis lists kombu keeps ``queue`` in, one per priority step, served first first:
    ``queue`` for step 0, ``queue<sep><step>`` for the others (Celery's Redis guide)."""
    return [f"{prefix}{queue}{'' if step == 0 else f'{sep}{step}'}" for step in steps]
