"""A history of what happened across hosts, and one checker of it (Jepsen-style).

Tests record operations with host and time: a submit answered (``acked`` on a 202,
``refused`` otherwise), a run started, a result kept, a late result dropped, an effect
recorded, a slot fired (published) or ran (its work done), a span of ownership (a beat's
lease). Most are read after the fact: the database's rows (``documents_history``,
``slots_history``) and the fence's journal in Redis (``journal_history``); the client adds
its own record of the answers it got. ``check`` counts and names every violation:

- *lost*: acknowledged, and never done nor failed (``stuck`` if a run started);
- *doubled*: more than one result kept for one key, or a slot's work run twice;
- *effect twice*: one effect (key, what) recorded more than once;
- *ack not kept*: a 202 whose row is not there; *refused but kept*: a refused request whose
  row is (only when the history says rows were read: ``kept`` ops);
- *fired twice* and *missed*: a slot published more than once, a grid slot between a job's
  first and last slot that was neither published nor run;
- *two owners*: two holders' ownership spans of one resource overlapping;
- *stale publish*: a slot published by a holder after another holder's election (the spans
  start at elections: the publisher must be the latest elected before the publish).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from scheduler.fence import JournalEntry
from tests.scheduler.netfaults import belief_intervals

KINDS = ("acked", "refused", "kept", "started", "done", "failed", "dropped", "effect",
         "fired", "ran", "owned")


@dataclass(frozen=True)
class Op:
    kind: str  # one of KINDS
    key: str  # a document, a request's own name, "<job>|<slot ISO>", a resource
    host: str = ""  # who did it: a host, a node name, a beat token
    at: float = 0.0  # seconds (any one clock per history)
    end: float | None = None  # an ownership span's end
    what: str = ""  # an effect's identity within its key

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown operation kind {self.kind!r}")


@dataclass
class History:
    ops: list[Op] = field(default_factory=list)

    def add(self, kind: str, key: object, **kwargs: Any) -> None:
        self.ops.append(Op(kind, str(key), **kwargs))

    def of(self, kind: str) -> list[Op]:
        return [op for op in self.ops if op.kind == kind]


@dataclass
class Verdict:
    acknowledged: int = 0
    refused: int = 0
    done: int = 0
    lost: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)
    effects_twice: list[str] = field(default_factory=list)
    ack_not_kept: list[str] = field(default_factory=list)
    refused_but_kept: list[str] = field(default_factory=list)
    fired_twice: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    two_owners: list[str] = field(default_factory=list)
    stale_publish: list[str] = field(default_factory=list)
    dropped: int = 0  # late results the fence turned away (not a violation: the mechanism)
    # Slots published that no run record covers: their messages expired unrun (a job's
    # missed policy allows it; not a violation, but counted: a worker whose clock ran ahead
    # of the beat's dropped every one it took, adr/0044).
    unrun: list[str] = field(default_factory=list)

    @property
    def violations(self) -> dict[str, list[str]]:
        named = {"lost": self.lost, "stuck": self.stuck, "doubled": self.doubled,
                 "effects_twice": self.effects_twice, "ack_not_kept": self.ack_not_kept,
                 "refused_but_kept": self.refused_but_kept, "fired_twice": self.fired_twice,
                 "missed": self.missed, "two_owners": self.two_owners,
                 "stale_publish": self.stale_publish}
        return {name: keys for name, keys in named.items() if keys}

    def counts(self) -> dict[str, int]:
        return {"acknowledged": self.acknowledged, "refused": self.refused, "done": self.done,
                "dropped": self.dropped, "unrun": len(self.unrun),
                **{name: len(keys) for name, keys in (
                    ("lost", self.lost), ("stuck", self.stuck), ("doubled", self.doubled),
                    ("effects_twice", self.effects_twice), ("ack_not_kept", self.ack_not_kept),
                    ("refused_but_kept", self.refused_but_kept),
                    ("fired_twice", self.fired_twice), ("missed", self.missed),
                    ("two_owners", self.two_owners), ("stale_publish", self.stale_publish))}}

    def assert_ok(self) -> None:
        assert not self.violations, f"history violated: {self.violations}; {self.counts()}"


def check(history: History, *, every: dict[str, float] | None = None) -> Verdict:
    """Judge ``history``; ``every`` gives each job's slot spacing (seconds) for *missed*."""
    v = Verdict()
    acked = {op.key for op in history.of("acked")}
    refused = {op.key for op in history.of("refused")}
    v.acknowledged, v.refused = len(acked), len(refused)
    results = Counter(op.key for op in history.of("done"))
    finished = set(results) | {op.key for op in history.of("failed")}
    started = {op.key for op in history.of("started")}
    v.done = len(set(results))
    v.dropped = len(history.of("dropped"))
    for key in sorted(acked - finished):
        (v.stuck if key in started else v.lost).append(key)
    ran = Counter(op.key for op in history.of("ran"))
    v.doubled = sorted(k for k, n in (results + ran).items() if n > 1)
    effects = Counter((op.key, op.what) for op in history.of("effect"))
    v.effects_twice = sorted(f"{k}:{w}" for (k, w), n in effects.items() if n > 1)
    kept_ops = history.of("kept")
    if kept_ops:
        kept = {op.key for op in kept_ops}
        v.ack_not_kept = sorted(acked - kept)
        v.refused_but_kept = sorted(refused & kept)
    fired = Counter(op.key for op in history.of("fired"))
    v.fired_twice = sorted(k for k, n in fired.items() if n > 1)
    v.missed = _missed(set(fired) | set(ran), every or {})
    if ran:
        v.unrun = sorted(set(fired) - set(ran))
    v.two_owners = _overlaps(history.of("owned"))
    v.stale_publish = _stale(history.of("fired"), history.of("owned"))
    return v


def _stale(fires: list[Op], spans: list[Op]) -> list[str]:
    """Publishes by anyone but the latest holder elected before them."""
    elections = sorted((op.at, op.host) for op in spans)
    stale = []
    for fire in fires:
        before = [host for at, host in elections if at <= fire.at]
        if before and before[-1] != fire.host:
            stale.append(f"{fire.key} by {fire.host} after {before[-1]} was elected")
    return stale


def _missed(slots_seen: set[str], every: dict[str, float]) -> list[str]:
    per_job: dict[str, list[datetime]] = defaultdict(list)
    for key in slots_seen:
        job, slot = key.split("|", 1)
        per_job[job].append(datetime.fromisoformat(slot))
    missed = []
    for job, spacing in every.items():
        slots = sorted(per_job.get(job, []))
        for before, after in zip(slots, slots[1:], strict=False):
            gap = round((after - before).total_seconds() / spacing) - 1
            missed += [f"{job}|after {before.isoformat()}#{i + 1}" for i in range(max(gap, 0))]
    return missed


def _overlaps(spans: list[Op]) -> list[str]:
    """Pairs of different holders whose spans of one resource overlap."""
    found = []
    by_resource: dict[str, list[Op]] = defaultdict(list)
    for op in spans:
        by_resource[op.key].append(op)
    for resource, ops in by_resource.items():
        ops.sort(key=lambda op: op.at)
        for i, first in enumerate(ops):
            for second in ops[i + 1:]:
                end = first.end if first.end is not None else float("inf")
                if second.at < end and second.host != first.host:
                    found.append(f"{resource}: {first.host} and {second.host}")
    return found


def db_time(value: object) -> datetime:
    """A timestamp read from either engine (a datetime, or SQLite-style naive UTC text) as an
    aware UTC datetime."""
    when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


class Database(Protocol):
    def query(self, sql: str, *params: Any) -> list[Any]: ...


def documents_history(db: Database, history: History, ids: list[int]) -> None:
    """Add what the database says about documents ``ids``: each row kept, each run started
    and how it ended, each fact recorded (an effect, by kind and value)."""
    if not ids:
        return
    marks = ",".join("?" * len(ids))
    for row in db.query(f"SELECT id, state FROM documents_document WHERE id IN ({marks})",
                        *ids):
        history.add("kept", row[0])
    for doc, worker, outcome, started in db.query(
            f"SELECT document_id, worker, outcome, started_at FROM documents_documentrun "
            f"WHERE document_id IN ({marks}) ORDER BY id", *ids):
        history.add("started", doc, host=worker, at=db_time(started).timestamp())
        if outcome in ("done", "failed"):
            history.add(outcome, doc, host=worker)
        elif outcome == "superseded":
            history.add("dropped", doc, host=worker)
    for doc, kind, value in db.query(
            f"SELECT document_id, kind, value FROM documents_documentfact "
            f"WHERE document_id IN ({marks})", *ids):
        history.add("effect", doc, what=f"{kind}={value}")


def slots_history(db: Database, history: History, *, jobs: list[str]) -> None:
    """Add every scheduled slot of ``jobs`` the run records hold (one row per slot whose
    work ran: the database's fence), as ``ran`` under the beat token that fired it."""
    marks = ",".join("?" * len(jobs))
    for job, slot, fired_by in db.query(
            f"SELECT job, slot, fired_by FROM reports_jobrun WHERE kind = 'scheduled' "
            f"AND job IN ({marks}) ORDER BY slot", *jobs):
        history.add("ran", f"{job}|{db_time(slot).isoformat()}", host=fired_by)


def journal_history(entries: list[JournalEntry], history: History, *,
                    jobs: list[str]) -> None:
    """Add the fence's journal (Redis's own order and clock): each slot of ``jobs``
    published, by which beat token, and each token's span of belief in its lease (from its
    election to the end of the last lease it renewed: tests/scheduler/netfaults.py)."""
    for entry in entries:
        if entry.kind == "fired" and entry.detail.split("|", 1)[0] in jobs:
            history.add("fired", entry.detail, host=entry.token, at=entry.at)
    for token, (start, end) in belief_intervals(entries).items():
        history.add("owned", "beat lease", host=token, at=start, end=end)
