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
# lease renewal and the worker heartbeat (celery_conf/inflight.py, through the app's config:
# ``platform_lease_renew_interval``, ``platform_heartbeat_ttl``) from these defaults or from
# the arguments config/settings/base.py passes. platform/supervisord.conf's worker stop timeout
# must exceed the hard time limit; tests/celery_conf/test_policy.py checks it.

# A message delivered to a worker that dies is handed to another worker this many seconds
# after its lease was last renewed (see celery_conf/inflight.py). Celery's default is 3600.
DEFAULT_VISIBILITY_TIMEOUT = 30
# How often a live worker renews the lease of every message it holds. Several renewals fit in
# one visibility timeout, so a worker that is merely slow for a moment keeps its messages.
DEFAULT_LEASE_RENEW_INTERVAL = 5
# How often each worker sweeps for expired leases. kombu's default sweep is every 100 s
# (interval 10 x throttle 10); ours bounds redelivery at timeout + sweep.
DEFAULT_RESTORE_SWEEP_INTERVAL = 5
# Expiry of kombu's ``unacked_mutex``, the lock every worker's sweep takes for 1-12 ms. A worker
# killed while holding it blocks every sweep until it expires: kombu's default of 300 s turned
# a 35 s redelivery into 5 minutes. It must stay below the visibility timeout minus one renewal
# (a lock that outlived a lease would delay that lease's restore past the bound) and far above
# the longest hold (a sweep restores at most 10 messages). Two sweeps overlapping after an
# early expiry are harmless: each restore is a WATCHed transaction on the ``unacked`` hash.
DEFAULT_UNACKED_MUTEX_EXPIRE = 5
# Task time limits: the soft one raises inside the task so it can record its failure; the hard
# one kills the pool process. supervisord waits longer than the hard one on a deploy.
DEFAULT_SOFT_TIME_LIMIT = 300
DEFAULT_TIME_LIMIT = 360
# A worker's heartbeat key outlives this many missed renewals, then vanishes: the worker is gone.
HEARTBEAT_RENEWALS = 3


def durable_task_settings(
    *,
    broker_url: str,
    visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT,
    lease_renew_interval: int = DEFAULT_LEASE_RENEW_INTERVAL,
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
    if min(visibility_timeout, lease_renew_interval, restore_sweep_interval,
           unacked_mutex_expire, soft_time_limit, time_limit) <= 0:
        raise ValueError("every timing of the durable-task policy must be positive")
    if visibility_timeout <= lease_renew_interval * 2:
        raise ValueError(
            f"visibility_timeout ({visibility_timeout} s) must allow at least two lease "
            f"renewals (lease_renew_interval {lease_renew_interval} s)")
    if unacked_mutex_expire >= visibility_timeout - lease_renew_interval:
        raise ValueError(
            f"unacked_mutex_expire ({unacked_mutex_expire} s) must stay below the visibility "
            f"timeout minus one renewal ({visibility_timeout - lease_renew_interval} s)")
    if soft_time_limit >= time_limit:
        raise ValueError("soft_time_limit must be below time_limit")
    settings: dict[str, Any] = {
        # https://docs.celeryq.dev/en/stable/userguide/configuration.html#broker-url
        "broker_url": broker_url,
        # Keep retrying the broker at start-up: under the supervisor, Redis may start later.
        "broker_connection_retry_on_startup": True,
        # https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/redis.html#visibility-timeout
        "broker_transport_options": {
            # Bounded redelivery after a worker dies; live workers renew their leases.
            "visibility_timeout": visibility_timeout,
            # Sweep for expired leases every few seconds instead of every 100 s.
            "unacked_restore_interval": restore_sweep_interval,
            "unacked_restore_throttle": 1,
            # A worker killed while holding the sweep's lock delays every sweep this long.
            "unacked_mutex_expire": unacked_mutex_expire,
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
        # Read by celery_conf/inflight.py: the lease renewal period, and the heartbeat's TTL
        # that follows it (a TTL shorter than the renewal would mark live workers dead).
        "platform_lease_renew_interval": lease_renew_interval,
        "platform_heartbeat_ttl": lease_renew_interval * HEARTBEAT_RENEWALS,
        # State lives on the rows the tasks update; no result backend to grow or to lose.
        "task_ignore_result": True,
        # --- routing --------------------------------------------------------------------
        "task_default_queue": str(Queue.DEFAULT),
        "task_queues": tuple(KombuQueue(str(q), routing_key=str(q)) for q in Queue),
        "task_routes": task_routes(),
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
