"""Celery settings for the elected beat, keyed with the ``CELERY_`` prefix like the policy's.

Reference: https://docs.celeryq.dev/en/stable/userguide/configuration.html#beat-settings and
RedBeat's https://redbeat.readthedocs.io/en/latest/config.html. Chosen so that a standby leads
within 10 s of the leader's death (see adr/0006-elect-one-beat-with-a-short-redbeat-lock.md).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery.schedules import schedule

from celery_conf.connections import (
    BEAT_CALL_TIMEOUT_S,
    BEAT_RETRIES,
    RedisTarget,
    redbeat_connection_settings,
)
from config.env import env_float, env_str

from .tables import JOBS

# The beat wakes at least this often: the leader renews its lock, the standby tries to take it.
# Celery's default is 300 s for custom schedulers; each wake-up costs a few Redis commands.
DEFAULT_LOOP_INTERVAL = 1.0
# How long the lock outlives the leader's last renewal. Five missed renewals (RedBeat's own
# ratio) before a healthy but stalled leader loses it (a timeout close to the loop interval
# makes healthy leaders crash: RedBeat #129, #218, #230); short enough that a standby polling
# every loop interval leads within lock timeout + one interval (about 6 s) of a leader's death.
DEFAULT_LOCK_TIMEOUT = 5.0
# RedBeat's keys: <prefix>:lock, <prefix>:schedule, <prefix>:statics, <prefix><entry name>.
# Configurable only so two platforms can share one Redis (and a test can split the brain).
KEY_PREFIX = env_str("BEAT_KEY_PREFIX", "platform:beat:")
# A Redis call (connect, or one command) that hangs this long is given up, and never retried
# inside the same tick: one renewal interval, so a renewal stuck on a dead link is abandoned
# before the next one is due and every call ends well inside the lock (5 s). The fence's
# scripts refuse a call that lands after this deadline (scheduler/fence.py), so giving up
# is final: a late renewal cannot extend the lock, a late publish cannot push a message.
# Written once in celery_conf/connections.py, with every other Redis timeout.
REDIS_SOCKET_TIMEOUT = BEAT_CALL_TIMEOUT_S
# redis-py 8 retries a failed command 3 times with backoff by default (one renewal blocked
# 5 s in the issue-12 trials); the beat retries at its next tick instead, with a fresh
# deadline, so a call never outlives its own.
REDIS_RETRIES = BEAT_RETRIES
# The beat's broker connection (kombu, same Redis) under the same bounds: connect and
# command timeouts, no retry loop around connecting or publishing.
def broker_transport_options() -> dict[str, Any]:
    return {
        "socket_timeout": REDIS_SOCKET_TIMEOUT,
        "socket_connect_timeout": REDIS_SOCKET_TIMEOUT,
        "retry_on_timeout": False,
        "max_retries": REDIS_RETRIES,
    }


# How far back a new leader fires slots that no beat fired: every slot that started within
# this window is fired (each once, in order), older ones count as lost to an outage and the
# job's missed policy applies. Six times the 10 s handover bound, so a handover under any
# network fault tested (about 5-8 s, adr/0017) loses nothing, while a beat back from an
# hour-long outage does not replay an hour of slots.
BACKFILL_WINDOW_S = 60.0
SCHEDULER_CLASS = "scheduler.redbeat:FencedRedBeatScheduler"


def beat_schedule() -> dict[str, dict[str, Any]]:
    """Every job of every table as a beat entry; the scheduler puts them on the slot grid."""
    return {
        job.name: {
            "task": job.name,
            "schedule": schedule(run_every=timedelta(seconds=job.every)),
            "options": {"expires": job.expires},
        }
        for job in JOBS.values()
    }


def beat_settings(*, redis_url: str = "",
                  connection: dict[str, Any] | None = None) -> dict[str, Any]:
    """``connection``: RedBeat's URL and options from celery_conf.connections (Sentinel,
    TLS); without it, ``redis_url`` with the beat's bounded options."""
    if connection is None:
        connection = redbeat_connection_settings(RedisTarget(url=redis_url))
    loop_interval = env_float("BEAT_LOOP_INTERVAL_S", DEFAULT_LOOP_INTERVAL)
    lock_timeout = env_float("BEAT_LOCK_TIMEOUT_S", DEFAULT_LOCK_TIMEOUT)
    if lock_timeout < 3 * loop_interval:
        raise ValueError("BEAT_LOCK_TIMEOUT_S must allow at least three renewals of the lock")
    settings: dict[str, Any] = {
        # `celery beat` without -S still runs the elected scheduler.
        "beat_scheduler": SCHEDULER_CLASS,
        "beat_max_loop_interval": loop_interval,
        "beat_schedule": beat_schedule(),
        # RedBeat 2.5 stops falling back to broker_url and broker_transport_options; the
        # broker's options (visibility timeout, restore sweep) mean nothing to the lock anyway.
        **connection,
        "redbeat_key_prefix": KEY_PREFIX,
        "redbeat_lock_timeout": lock_timeout,
    }
    return {f"CELERY_{key.upper()}": value for key, value in settings.items()}
