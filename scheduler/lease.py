"""The leader's hold on the beat lock: taken, renewed and released only through the fence.

The lock is RedBeat's key (``<prefix>:lock``) holding the leader's token. It is taken with
``SET NX PXAT`` and renewed with ``PEXPIREAT ... GT`` inside the fence's scripts
(scheduler/fence.py), each refused by Redis if the caller's deadline has passed when it
lands: a request the beat gave up on cannot take or extend the lock afterwards. The expiry is
the send time plus the lock timeout, the same moment the beat's own lease ends, so a request
delayed in the network does not make the lock outlive the beat's belief (hosts need NTP). The
token names the beat, so ``manage.py beat_status`` can say who leads.

``valid_until`` is measured on this process's monotonic clock from *before* each successful
renewal was sent, so it never outlives the key in Redis; a process frozen (SIGSTOP, a long GC
pause, a stalled VM) past it sees the deadline gone the moment it runs again. Every fenced
write also carries that deadline to Redis, so even a write already on the wire when the
process froze is refused if it lands after it.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterable
from typing import Any

import redis

from celery_conf.connections import clock_beyond

from .fence import (
    ACQUIRE,
    JOURNAL_MAX,
    RELEASE,
    WRITE,
    Command,
    Condition,
    FenceRefused,
    JournalEntry,
    flatten,
    journal_line,
    ms,
    parse_journal,
)
from .settings import KEY_PREFIX

LOCK_KEY = f"{KEY_PREFIX}:lock"
LEADER_KEY = f"{KEY_PREFIX}:leader"
JOURNAL_KEY = f"{KEY_PREFIX}:journal"
# Publishing stops this fraction of the timeout before the local deadline: slack for the
# moment between the check and the message reaching Redis, and for clock-rate differences.
SAFETY_FRACTION = 0.1


def beat_identity(host: str | None = None) -> str:
    """``<name>@<host>:<pid>``; the name is the supervisor's process name (beat1, beat2), the
    host the platform's host name (PLATFORM_HOST_NAME) when the app's config gives it."""
    name = os.environ.get("BEAT_NAME") or os.environ.get("SUPERVISOR_PROCESS_NAME") or "beat"
    return f"{name}@{host or socket.gethostname()}:{os.getpid()}"


class Lease:
    def __init__(self, client: Any, *, key: str, timeout: float, identity: str,
                 call_timeout: float) -> None:
        if call_timeout >= timeout * (1 - SAFETY_FRACTION):
            raise ValueError("a Redis call must time out well inside the lock timeout")
        self.client = client
        self.key = key
        self.timeout = timeout
        # How long one Redis call may take before this beat gives up on it; also the
        # deadline each fenced write carries (never later than the lease itself).
        self.call_timeout = call_timeout
        self.token = f"{identity}:{uuid.uuid4().hex[:8]}"
        self._acquire = client.register_script(ACQUIRE)
        self._write = client.register_script(WRITE)
        self._release = client.register_script(RELEASE)
        self.valid_until: float | None = None
        # A renewal got no answer (or was refused) since the last answered one.
        self._unanswered = False
        # After a failed try: how long the current holder's lock still runs, if known.
        self.other_holds_for: float | None = None

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

    @property
    def max_clock_offset(self) -> float:
        """How far this host's clock may be from Redis's for this beat to take the lock: the
        slack the lease already keeps (``SAFETY_FRACTION`` of the timeout, 0.5 s at 5 s). A
        clock ahead by more stretches the lock past the holder's death by the difference (the
        handover bound no longer holds); one behind by more than a call's timeout has every
        write refused as late (it can never lead, silently). Measured in adr/0044."""
        return self.timeout * SAFETY_FRACTION

    def clock_beyond_bound(self) -> float | None:
        """This host's clock offset from Redis's, if it is certainly beyond
        ``max_clock_offset``; None otherwise."""
        return clock_beyond(self.client, self.max_clock_offset)

    def try_acquire(self) -> bool:
        started, sent = time.monotonic(), time.time()
        taken, held_ms = self._acquire(
            keys=[self.key, JOURNAL_KEY, LEADER_KEY],
            args=[self.token, ms(sent + self.timeout), ms(sent + self.call_timeout), JOURNAL_MAX,
                  journal_line("elected", self.token, sent), ms(sent - self.max_clock_offset)])
        if taken == -3:
            raise FenceRefused(-3, "taking the beat lock")
        if taken != 1:
            self.other_holds_for = int(held_ms) / 1000 if int(held_ms) > 0 else None
            return False
        self.valid_until = started + self.timeout
        return True

    def renew(self) -> None:
        """Reset the key's expiry; raises FenceRefused if it is not ours or arrived too late.

        After a renewal that got no answer, the next one only probes: it may have landed
        (extending the lock while this beat, without the reply, does not count on it), so
        renewals sent into a link that answers too slowly must not go on stretching the lock
        past what this beat believes. The probe sets the expiry to this beat's own lease end
        at most (``PEXPIREAT ... GT``, never shortening it); once one is answered, the next
        renewal extends again.
        """
        started = time.monotonic()
        try:
            if self._unanswered:
                lease_end = time.time() + self.remaining()
                self.write([("PEXPIREAT", self.key, ms(lease_end), "GT")],
                           journal=[("probed", "-")], what="probing the beat lock")
                self._unanswered = False
                return
            # To this beat's own lease end, counted from the send (not from when it lands),
            # and never shorter than it is (an older renewal landing late).
            self.write([("PEXPIREAT", self.key, ms(time.time() + self.timeout), "GT")],
                       journal=[("renewed", "-")], what="renewing the beat lock")
        except BaseException:
            self._unanswered = True
            raise
        self.valid_until = started + self.timeout

    def write(self, commands: Iterable[Command], *, what: str,
              journal: Iterable[tuple[str, str]] = (),
              conditions: Iterable[Condition] = ()) -> None:
        """Run ``commands`` in Redis only if the lock is ours, this call is not late and every
        condition holds; ``journal`` lines are (kind, detail), appended if it ran."""
        sent = time.time()
        # The write must land before this beat stops waiting for it, and before its lease
        # ends (with the publishing margin): whichever comes first.
        lease_left = self.remaining() - self.timeout * SAFETY_FRACTION
        deadline = sent + min(self.call_timeout, lease_left)
        conds = [word for c in conditions for word in (c.key, c.field, c.expected)]
        lines = [journal_line(kind, self.token, sent, detail) for kind, detail in journal]
        code = self._write(
            keys=[self.key, JOURNAL_KEY],
            args=[self.token, ms(deadline), JOURNAL_MAX, ms(sent - self.max_clock_offset),
                  len(conds) // 3, *conds, len(lines), *lines, *flatten(commands)])
        if code == -3:
            # This host's clock ran ahead while it led (adr/0044): it would fire slots early
            # and stretch the lock past its death. Nothing was written; the lock is let go at
            # once, so the standby takes over now rather than at its expiry.
            self.release()
        if code != 1:
            raise FenceRefused(int(code), what)

    def forget(self) -> None:
        self.valid_until = None

    def release(self) -> None:
        """Give the lock up at once (a clean stop), so the standby need not wait it out."""
        self.valid_until = None
        try:
            self._release(keys=[self.key, JOURNAL_KEY],
                          args=[self.token, JOURNAL_MAX,
                                journal_line("released", self.token, time.time())])
        except redis.RedisError:
            pass  # Redis is away: the lock expires on its own


def read_journal(client: redis.Redis, *, last: int = JOURNAL_MAX) -> list[JournalEntry]:
    """The beats' fenced writes in the order Redis applied them (oldest first)."""
    return parse_journal(client.lrange(JOURNAL_KEY, -last, -1))


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
