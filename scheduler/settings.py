"""Celery settings for the elected beat, keyed with the ``CELERY_`` prefix like the policy's.

Reference: https://docs.celeryq.dev/en/stable/userguide/configuration.html#beat-settings and
RedBeat's https://redbeat.readthedocs.io/en/latest/config.html. Chosen so that a standby leads
within 10 s of the leader's death (see adr/0006-elect-one-beat-with-a-short-redbeat-lock.md).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery.schedules import schedule

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
# A Redis command that hangs this long is treated as Redis being away, well inside one lock
# timeout, so a leader cut off from Redis notices before its lease could have passed on.
REDIS_SOCKET_TIMEOUT = 2.0
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


def beat_settings(*, redis_url: str) -> dict[str, Any]:
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
        "redbeat_redis_url": redis_url,
        "redbeat_redis_options": {
            "socket_timeout": REDIS_SOCKET_TIMEOUT,
            "socket_connect_timeout": REDIS_SOCKET_TIMEOUT,
        },
        "redbeat_key_prefix": KEY_PREFIX,
        "redbeat_lock_timeout": lock_timeout,
    }
    return {f"CELERY_{key.upper()}": value for key, value in settings.items()}
