"""The stream protocol's pure parts, in process: no Redis needed for what they decide.

The heartbeat race is forced, not hoped for: the event is delivered by a timer at exactly the
heartbeat's deadline, so both fire in the same event-loop pass (whichever runs first, the
event is in the connection's backlog while the hub's position already counts it).
"""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from apps.events.hub import Hub, Subscriber
from apps.events.stream import live
from apps.events.types import Event, parse_id


def _event(event_id: str) -> Event:
    return Event(id=event_id, kind="broadcast", user_id=None, time=0.0,
                 data={"message": event_id, "sender": "test"})


async def _race(rounds: int) -> list[bytes]:
    loop = asyncio.get_running_loop()
    hub = Hub("redis://unused")  # never started: the test plays the subscription's part
    hub.generation = 1
    sub = Subscriber(user_id=1, session="s", maxsize=8)
    hub._all.add(sub)
    hub._by_user[1] = {sub}
    stream = live(sub, hub=hub, generation=1, position=(1, 0), heartbeat_s=0.05,
                  ends_at=loop.time() + 60)
    frames: list[bytes] = []
    for i in range(rounds):
        pending = asyncio.ensure_future(anext(stream))
        while not sub.waiting:  # until the stream blocks, its deadline armed
            await asyncio.sleep(0)
        # The event arrives at exactly the heartbeat's deadline: the same loop pass.
        loop.call_at(sub.wake_at, hub._dispatch, [_event(f"{i + 2}-0")])
        frames.append(await pending)
        while sub.pending:
            frames.append(await anext(stream))
    await stream.aclose()
    return frames


class _Wire:
    """The socket side of a connection, as the hub sees it: writes recorded in order."""

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.open = True  # False: the transport has bytes buffered (a backed-up client)

    def writable(self) -> bool:
        return self.open

    def write(self, chunk: bytes) -> None:
        self.out.append(chunk)


async def _race_wired(rounds: int) -> tuple[list[bytes], _Wire]:
    """The hub writing an idle connection's events straight to the wire, each event twice;
    every other round the wire is backed up, so the event goes through the backlog. An open
    round ends with the heartbeat (a direct write does not wake the stream)."""
    loop = asyncio.get_running_loop()
    hub = Hub("redis://unused")
    hub.generation = 1
    hub.position = (1, 0)
    wire = _Wire()
    sub = Subscriber(user_id=1, session="s", maxsize=8, wire=wire)  # type: ignore[arg-type]
    hub._all.add(sub)
    hub._by_user[1] = {sub}
    stream = live(sub, hub=hub, generation=1, position=(1, 0), heartbeat_s=0.05,
                  ends_at=loop.time() + 60)
    yielded: list[bytes] = []
    for i in range(rounds):
        wire.open = i % 2 == 0
        pending = asyncio.ensure_future(anext(stream))
        while not sub.waiting:
            await asyncio.sleep(0)
        # Twice while it waits, once replayed already (the hub must not send it again).
        loop.call_soon(hub._dispatch, [_event(f"{i + 2}-0")])
        loop.call_soon(hub._dispatch, [_event(f"{i + 2}-0")])
        yielded.append(await pending)
        while sub.pending:
            yielded.append(await anext(stream))
    await stream.aclose()
    return yielded, wire


def test_events_written_straight_to_the_wire_arrive_once_in_order() -> None:
    yielded, wire = asyncio.run(_race_wired(rounds=20))
    out = b"".join(wire.out).split(b"\r\n")
    # Each direct write is whole HTTP chunks: size line, then exactly that many bytes.
    direct = [payload for size, payload in zip(out[0::2], out[1::2], strict=False)
              if size and int(size, 16) == len(payload)]
    assert len(direct) == len(wire.out), wire.out

    def ids(frames: list[bytes]) -> list[str]:
        return [line.split(b": ", 1)[1].decode() for f in frames if b"event: broadcast" in f
                for line in f.split(b"\n") if line.startswith(b"id: ")]

    # Once each: the open rounds' events on the wire, the backed-up rounds' through the backlog.
    assert ids(direct) == [f"{i + 2}-0" for i in range(0, 20, 2)], wire.out
    assert ids(yielded) == [f"{i + 2}-0" for i in range(1, 20, 2)], yielded


def test_a_heartbeat_in_the_same_pass_as_an_event_never_skips_it() -> None:
    frames = asyncio.run(_race(rounds=20))
    sent = [f for f in frames if b"event: broadcast" in f]
    ids = [line.split(b": ", 1)[1].decode() for f in sent for line in f.split(b"\n")
           if line.startswith(b"id: ")]
    assert ids == [f"{i + 2}-0" for i in range(20)], f"skipped: {frames!r}"
    # Every heartbeat happened with the event still queued, so none moved the cursor.
    assert all(b"id:" not in f for f in frames if b"heartbeat" in f)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80) | st.from_regex(r"[0-9]{1,6000}-[0-9]{1,30}", fullmatch=True))
def test_any_cursor_parses_or_is_refused_never_raises(raw: str) -> None:
    sid = parse_id(raw)
    assert sid is None or (0 <= sid[0] < 2**64 and 0 <= sid[1] < 2**64)


def test_the_cursors_of_the_issue_are_refused() -> None:
    assert parse_id("²-0") is None
    assert parse_id("1" * 5000 + "-0") is None
    assert parse_id("18446744073709551616-0") is None  # 2**64: beyond Redis's ids
    assert parse_id(" 1700000000000-3 ") == (1700000000000, 3)


async def _attach_around_an_end() -> tuple[str | None, str | None, str | None]:
    loop = asyncio.get_running_loop()
    hub = Hub("redis://unused")
    hub._task = asyncio.ensure_future(asyncio.sleep(3600))  # the subscription, played here
    hub._ready.set()
    authenticating = loop.time()  # its session read happens now, before the end is committed
    hub._end_sessions('{"user": 1, "session": "s"}')
    late = Subscriber(user_id=1, session="s", maxsize=8, since=authenticating)
    other_login = Subscriber(user_id=1, session="t", maxsize=8, since=authenticating)
    after = Subscriber(user_id=1, session="s", maxsize=8, since=loop.time() + 1)
    for sub in (late, other_login, after):
        await hub.attach(sub, timeout=1)
    hub._task.cancel()
    return late.closed, other_login.closed, after.closed


def test_a_stream_authenticated_just_before_its_session_ended_is_closed_on_attach() -> None:
    # The end reached the hub between the stream's session read and its attach: without the
    # hub's memory of recent ends it would stream until its next re-authentication.
    late, other_login, after = asyncio.run(_attach_around_an_end())
    assert late == "ended"
    assert other_login is None  # another session of the same user is not affected
    assert after is None  # authenticated after the end: its read saw the ended session
