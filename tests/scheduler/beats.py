"""Reads what the beats and workers of a Stack did: who leads, which slots fired and ran.

Three witnesses, so a double shows up even if one of them were wrong: the run records (one
row per scheduled slot), the workers' "reports: running" lines (one per slot whose work ran)
and the digest e-mails (one per user per slot). Beat logs say which beat fired what.
"""

from __future__ import annotations

import email
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from tests.procs import Proc, Stack, wait_until

ROLLUP = "reports.usage_rollup"
DIGEST = "reports.daily_digest"
PURGE = "reports.retention_purge"
# Jobs due every 1-2 s. Roll-up catches missed slots up; digest and purge skip them.
EVERY = {ROLLUP: 1, DIGEST: 2, PURGE: 2}
CATCH_UP = {ROLLUP}
BEAT_ENV = {
    "REPORTS_ROLLUP_EVERY_S": "1",
    "REPORTS_DIGEST_EVERY_S": "2",
    "REPORTS_PURGE_EVERY_S": "2",
}
LOCK_KEY = "platform:beat::lock"
LEADER_KEY = "platform:beat::leader"
LOCK_TIMEOUT_S = 5.0
# The promise: a standby leads within 10 s of the leader's death (lock 5 s + poll 1 s, plus
# slack for a loaded machine). Used as a deadline, not a speed test; the measured numbers
# are what the README reports.
HANDOVER_BOUND_S = 10.0
HANDOVER_DEADLINE_S = 20.0

FIRED = re.compile(r"beat: fired (\S+) slot=(\S+) by=(\S+)")
RAN = re.compile(r"reports: running (\S+) scheduled slot=(\S+)")


def lock_token(stack: Stack) -> str | None:
    return stack.redis.client().get(LOCK_KEY)


def pid_of(token: str) -> int:
    return int(token.rsplit(":", 2)[1])


def wait_leader(stack: Stack, *, other_than: str | None = None,
                timeout: float = HANDOVER_DEADLINE_S) -> tuple[str, float]:
    """The leading beat's token and when it took the lock (its own wall clock)."""
    client = stack.redis.client()

    def elected() -> tuple[str, float] | None:
        token = client.get(LOCK_KEY)
        leader = client.hgetall(LEADER_KEY)
        if token and token != other_than and leader.get("token") == token:
            return token, float(leader["since"])
        return None

    return wait_until(elected, timeout=timeout, interval=0.05, what="a beat leads")


def leader_proc(beats: list[Proc], token: str) -> Proc:
    return next(p for p in beats if p.pid == pid_of(token))


def fired(beats: list[Proc]) -> list[tuple[str, str, str]]:
    """(job, slot, token) for every publish in every beat's log, the dead ones' included."""
    return [m.groups() for p in beats for m in FIRED.finditer(p.log())]  # type: ignore[misc]


def wait_runs(stack: Stack, job: str, *, after: datetime, count: int, timeout: float) -> None:
    def enough() -> bool:
        rows = stack.query(
            "SELECT COUNT(*) FROM reports_jobrun WHERE job = ? AND kind = 'scheduled' "
            "AND outcome = 'done' AND slot > ?", job, _db_time(after))
        return rows[0][0] >= count

    wait_until(enough, timeout=timeout, interval=0.2,
               what=f"{count} runs of {job} with slots after {after:%H:%M:%S}")


@dataclass
class Tally:
    runs: int = 0
    doubled: int = 0  # slots whose work ran more than once, by any witness
    fired_twice: int = 0  # slots published more than once (the lock alone should prevent it)
    fenced: int = 0  # second deliveries the run record turned away
    missed: dict[str, int] = field(default_factory=dict)  # slots no run covered, per job
    unfinished: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"runs": self.runs, "doubled": self.doubled, "fired_twice": self.fired_twice,
                "fenced": self.fenced, "unfinished": self.unfinished,
                **{f"missed_{job.split('.')[1]}": n for job, n in self.missed.items()}}


def tally(stack: Stack, beats: list[Proc], workers: list[Proc]) -> Tally:
    result = Tally()
    rows = stack.query(
        "SELECT job, slot, covers_from, outcome, duplicates FROM reports_jobrun "
        "WHERE kind = 'scheduled' ORDER BY job, slot")
    result.runs = len(rows)
    per_slot = Counter((r["job"], r["slot"]) for r in rows)
    ran = Counter(m.groups() for w in workers for m in RAN.finditer(w.log()))
    mails = Counter(_mails(stack))
    result.doubled = (sum(n - 1 for n in per_slot.values() if n > 1)
                      + sum(n - 1 for n in ran.values() if n > 1)
                      + sum(n - 1 for n in mails.values() if n > 1))
    published = Counter((job, slot) for job, slot, _ in fired(beats))
    result.fired_twice = sum(n - 1 for n in published.values() if n > 1)
    result.fenced = sum(r["duplicates"] for r in rows)
    result.unfinished = sum(1 for r in rows if r["outcome"] != "done")
    for job, every in EVERY.items():
        done = [r for r in rows if r["job"] == job and r["outcome"] == "done"]
        result.missed[job] = missed_slots(done, every=every, catch_up=job in CATCH_UP)
    return result


def missed_slots(done: list, *, every: int, catch_up: bool) -> int:  # type: ignore[type-arg]
    """Grid slots between the first and last run that no finished run's window covers."""
    missed = 0
    for before, after in zip(done, done[1:], strict=False):
        start = _parse(after["covers_from"] if catch_up else after["slot"])
        gap = round((start - _parse(before["slot"])) / timedelta(seconds=every)) - 1
        missed += max(gap, 0)
    return missed


def skipped_gaps(stack: Stack, job: str, every: int) -> list[int]:
    """Each run of missing slots of a skip job, in slots."""
    slots = [_parse(r[0]) for r in stack.query(
        "SELECT slot FROM reports_jobrun WHERE job = ? AND kind = 'scheduled' ORDER BY slot",
        job)]
    pairs = zip(slots, slots[1:], strict=False)
    gaps = [round((b - a) / timedelta(seconds=every)) - 1 for a, b in pairs]
    return [g for g in gaps if g > 0]


def _mails(stack: Stack) -> list[tuple[str, str]]:
    out = []
    for path in sorted((stack.base_dir / "mail").glob("*.log")):
        for chunk in path.read_text().split("\n" + "-" * 79 + "\n"):
            if not chunk.strip():
                continue
            message = email.message_from_string(chunk.strip())
            if message["X-Platform-Slot"]:
                out.append((str(message["To"]), str(message["X-Platform-Slot"])))
    return out


def digests(stack: Stack) -> list[tuple[str, str]]:
    return _mails(stack)


def _parse(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _db_time(when: datetime) -> str:
    # Django keeps aware datetimes in SQLite as naive UTC text, "YYYY-MM-DD HH:MM:SS".
    return when.astimezone(UTC).replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S")
