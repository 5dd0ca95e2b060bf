"""The leader's hold on the beat lock, with a local deadline that needs no Redis to check.

The lock is RedBeat's key (``<prefix>:lock``), taken with SET NX PX and renewed with RedBeat's
token-checked script that resets the expiry to the full timeout. The token names the beat, so
``manage.py beat_status`` can say who leads. ``valid_until`` is measured on this process's
monotonic clock from *before* each successful renewal, so it never outlives the key in Redis;
a process frozen (SIGSTOP, a long GC pause, a stalled VM) past it sees the deadline gone the
moment it runs again, before it publishes anything.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from typing import Any

import redis
from redbeat.schedulers import LUA_EXTEND_TO_SCRIPT

from .settings import KEY_PREFIX

LOCK_KEY = f"{KEY_PREFIX}:lock"
LEADER_KEY = f"{KEY_PREFIX}:leader"
# Publishing stops this fraction of the timeout before the local deadline: slack for the
# moment between the check and the message reaching Redis, and for clock-rate differences.
SAFETY_FRACTION = 0.1


def beat_identity() -> str:
    """``<name>@<host>:<pid>``; the name is the supervisor's process name (beat1, beat2)."""
    name = os.environ.get("BEAT_NAME") or os.environ.get("SUPERVISOR_PROCESS_NAME") or "beat"
    return f"{name}@{socket.gethostname()}:{os.getpid()}"


class Lease:
    def __init__(self, client: Any, *, key: str, timeout: float, identity: str) -> None:
        self.client = client
        self.key = key
        self.timeout = timeout
        self.token = f"{identity}:{uuid.uuid4().hex[:8]}"
        # thread_local=False: the token is ours whichever thread asks (beat has one anyway).
        self.lock = client.lock(key, timeout=timeout, blocking=False, thread_local=False)
        # RedBeat's script: extend *to* the timeout, not by it, so renewals never pile up.
        self.lock.lua_extend = client.register_script(LUA_EXTEND_TO_SCRIPT)
        self.valid_until: float | None = None

    @property
    def held(self) -> bool:
        return self.valid_until is not None

    def remaining(self) -> float:
        if self.valid_until is None:
            return 0.0
        return self.valid_until - time.monotonic()

    def valid(self) -> bool:
        """True while this process may still publish as the leader."""
        return self.remaining() > self.timeout * SAFETY_FRACTION

    def try_acquire(self) -> bool:
        started = time.monotonic()
        if not self.lock.acquire(blocking=False, token=self.token):
            return False
        self.valid_until = started + self.timeout
        return True

    def renew(self) -> None:
        """Reset the key's expiry; raises LockNotOwnedError if another beat holds it now."""
        started = time.monotonic()
        self.lock.extend(self.timeout)
        self.valid_until = started + self.timeout

    def forget(self) -> None:
        self.valid_until = None

    def release(self) -> None:
        """Give the lock up at once (a clean stop), so the standby need not wait it out."""
        self.valid_until = None
        try:
            self.lock.release()
        except (redis.exceptions.LockError, redis.RedisError):
            pass  # not ours any more, or Redis is away: it expires on its own

    def record_leadership(self) -> None:
        self.client.hset(LEADER_KEY, mapping={"token": self.token, "since": repr(time.time())})


def read_leadership(client: redis.Redis) -> dict[str, Any]:
    """Who holds the lock, since when, and when it expires; plain data for status output."""
    pipe = client.pipeline(transaction=False)
    pipe.get(LOCK_KEY)
    pipe.pttl(LOCK_KEY)
    pipe.hgetall(LEADER_KEY)
    token, pttl, leader = pipe.execute()
    now = time.time()
    if token is None:
        return {"leader": None, "lock_key": LOCK_KEY, "detail": "no beat holds the lock"}
    since = float(leader["since"]) if leader.get("token") == token else None
    return {
        "leader": token.rsplit(":", 1)[0],
        "token": token,
        "since": since,
        "leading_for_s": round(now - since, 1) if since is not None else None,
        "lock_expires_in_s": round(pttl / 1000, 2) if pttl and pttl > 0 else None,
        "lock_expires_at": now + pttl / 1000 if pttl and pttl > 0 else None,
        "lock_key": LOCK_KEY,
    }
