"""The fence's scripts against a real redis-server: a write lands only under the current
token, before its deadline, and (for a fire) on the last run it was computed from."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from scheduler.fence import WRITE, Condition, FenceRefused, flatten, journal_line, ms
from scheduler.lease import JOURNAL_KEY, LOCK_KEY, Lease, read_journal
from tests.procs import RedisServer

pytestmark = pytest.mark.processes


@pytest.fixture
def client(tmp_path: Path) -> Iterator[redis.Redis]:
    server = RedisServer(tmp_path).start()
    try:
        yield server.client()
    finally:
        server.stop()


def lease(client: redis.Redis, name: str) -> Lease:
    return Lease(client, key=LOCK_KEY, timeout=5.0, identity=name, call_timeout=1.0)


def test_a_write_after_the_lock_moved_changes_nothing(client: redis.Redis) -> None:
    old, new = lease(client, "old"), lease(client, "new")
    assert old.try_acquire()
    assert not new.try_acquire() and 4 < (new.other_holds_for or 0) <= 5
    client.delete(LOCK_KEY)  # the old leader's lock expired...
    assert new.try_acquire()  # ...and the standby took it
    with pytest.raises(FenceRefused) as refused:
        old.write([("LPUSH", "reports", "message"), ("HSET", "entry", "meta", "late")],
                  journal=[("fired", "job|slot")], what="a late fire")
    assert refused.value.reason == "moved"
    with pytest.raises(FenceRefused):
        old.renew()
    assert client.exists("reports", "entry") == 0
    assert client.get(LOCK_KEY) == new.token
    kinds = [(e.kind, e.token) for e in read_journal(client)]
    assert kinds == [("elected", old.token), ("elected", new.token)]


def test_a_renewal_that_lands_after_its_deadline_does_not_extend_the_lock(client):
    leader = lease(client, "leader")
    assert leader.try_acquire()
    client.pexpire(LOCK_KEY, 1000)
    sent = time.time() - 2  # sent two seconds ago with a 1 s timeout: the leader gave up
    code = client.register_script(WRITE)(
        keys=[LOCK_KEY, JOURNAL_KEY],
        args=[leader.token, ms(sent + 1.0), 100, ms(sent - 0.5), 0,
              1, journal_line("renewed", leader.token, sent),
              *flatten([("PEXPIRE", LOCK_KEY, 5000)])])
    assert code == -1
    assert client.pttl(LOCK_KEY) <= 1000
    assert [e.kind for e in read_journal(client)] == ["elected"]


def test_a_request_the_standby_gave_up_on_cannot_take_the_lock(client, monkeypatch):
    standby = lease(client, "standby")
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() - 5)  # its clock says it sent 5 s ago
    assert not standby.try_acquire()
    assert client.get(LOCK_KEY) is None


def test_a_fire_is_a_compare_and_set_on_the_last_run(client: redis.Redis) -> None:
    leader = lease(client, "leader")
    assert leader.try_acquire()
    client.hset("entry", "meta", "slot-1")
    fire = [("LPUSH", "reports", "slot-2 message"), ("HSET", "entry", "meta", "slot-2")]
    once = {"journal": [("fired", "job|slot-2")],
            "conditions": [Condition("entry", "meta", "slot-1")]}
    leader.write(fire, what="fire", **once)  # type: ignore[arg-type]
    # The same fire again (a retry after a timeout whose first copy did land): refused.
    with pytest.raises(FenceRefused) as refused:
        leader.write(fire, what="fire", **once)  # type: ignore[arg-type]
    assert refused.value.reason == "stale"
    assert client.lrange("reports", 0, -1) == ["slot-2 message"]
    fired = [e.detail for e in read_journal(client) if e.kind == "fired"]
    assert fired == ["job|slot-2"]


def test_an_outbox_item_names_its_slot_and_never_looks_like_a_task_message():
    from scheduler.outbox import OutboxItem, slot_task_id

    item = OutboxItem(job="reports.daily_digest", task_name="reports.daily_digest",
                      slot="2026-12-03T02:10:00+00:00", fired_by="b1@h:1:ab", fired_at=1.5,
                      expires_s=5.0, kwargs={"slot": "2026-12-03T02:10:00+00:00"},
                      task_id=slot_task_id("reports.daily_digest", "2026-12-03T02:10:00+00:00"))
    assert OutboxItem.loads(item.dumps()) == item
    # One slot, one task id, whichever beat publishes it and however often.
    assert item.task_id == slot_task_id("reports.daily_digest", "2026-12-03T02:10:00+00:00")
    assert item.task_id != slot_task_id("reports.daily_digest", "2026-12-04T02:10:00+00:00")
    # The network-fault tests tell the fenced fire from the publish by kombu's '"task": '.
    assert '"task":' not in item.dumps() and '"task": ' not in item.dumps()


def test_after_an_unanswered_renewal_the_next_cannot_stretch_the_lock(client: redis.Redis):
    leader = lease(client, "leader")
    assert leader.try_acquire()
    client.pexpire(LOCK_KEY, 2000)  # as if the lock had run down to 2 s...
    leader._unanswered = True  # ...because the last renewal got no answer
    leader.valid_until = time.monotonic() + 2.0
    leader.renew()  # a probe: answered, but the lock ends no later than the lease
    assert client.pttl(LOCK_KEY) <= 2000
    assert leader.remaining() <= 2.0
    leader.renew()  # answered probe: renewals extend again
    assert client.pttl(LOCK_KEY) > 4000 and leader.remaining() > 4.0
    assert [e.kind for e in read_journal(client)] == ["elected", "probed", "renewed"]


def test_a_leader_whose_clock_ran_ahead_writes_nothing_and_lets_the_lock_go(client, monkeypatch):
    leader, standby = lease(client, "leader"), lease(client, "standby")
    assert leader.try_acquire()
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 30)  # its clock jumps 30 s ahead
    with pytest.raises(FenceRefused) as refused:
        leader.write([("LPUSH", "reports", "early")], journal=[("fired", "job|slot")],
                     what="an early fire")
    assert refused.value.reason == "clock" and "ahead of Redis's" in str(refused.value)
    assert client.exists("reports") == 0
    assert client.get(LOCK_KEY) is None and not leader.held  # let go at once
    with pytest.raises(FenceRefused):  # nor can it take the lock again
        leader.try_acquire()
    monkeypatch.setattr(time, "time", real_time)
    assert standby.try_acquire()
    assert [e.kind for e in read_journal(client)] == ["elected", "released", "elected"]


def test_a_clock_within_the_bound_writes(client, monkeypatch):
    leader = lease(client, "leader")
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 0.3)  # 0.3 s ahead: within 0.5 s
    assert leader.try_acquire()
    leader.write([("LPUSH", "reports", "on time")], what="a fire")
    assert client.lrange("reports", 0, -1) == ["on time"]
