"""Reading the replay log from async code: what a reconnecting client missed, or a gap."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import redis.asyncio as aioredis

from .bus import LOG_KEY
from .types import Event, StreamId, decode, format_id, parse_id

# One round trip, atomic: the log's newest id, whether anything was ever trimmed, the oldest
# id kept, and a page after the cursor. (Redis 7.0's max-deleted-entry-id counts XDEL only,
# not trimming, so the trimmed range is inferred: entries-added > length, below first-entry.)
_READ_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'0-0', 0, '', {}} end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local last, added, length, oldest = '0-0', 0, 0, ''
for i = 1, #info, 2 do
  local k, v = info[i], info[i + 1]
  if k == 'last-generated-id' then last = v
  elseif k == 'entries-added' then added = v
  elseif k == 'length' then length = v
  elseif k == 'first-entry' and type(v) == 'table' then oldest = v[1] end
end
local page = {}
if tonumber(ARGV[2]) > 0 then
  page = redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])
end
local trimmed = 0
if added > length then trimmed = 1 end
return {last, trimmed, oldest, page}
"""

PAGE_SIZE = 500


class LogGap(Exception):
    """Events after the cursor are no longer in the log (or the log was reset)."""

    def __init__(self, tail: str) -> None:
        super().__init__(tail)
        self.tail = tail


@dataclass
class Page:
    events: list[Event]
    read_to: str  # every event up to this id has been read (this page, or earlier ones)


async def log_tail(client: aioredis.Redis) -> str:
    last, _trimmed, _oldest, _page = await client.eval(_READ_LUA, 1, LOG_KEY, "0-0", 0)
    return str(last)


def _missed_beyond_log(after: StreamId, last: StreamId, trimmed: bool, oldest: str) -> bool:
    if after > last:
        return True  # ids from the future: the log was reset (Redis lost its data)
    if not trimmed:
        return False  # nothing ever left the log
    kept = parse_id(oldest)
    if kept is None:
        return after < last  # everything was trimmed, including what came after the cursor
    # Entries below the oldest kept one were trimmed. A cursor exactly at the newest trimmed
    # entry also lands here: a needless resync in that one case, never a silent loss.
    return after < kept


async def log_after(client: aioredis.Redis, *, cursor: str) -> AsyncIterator[Page]:
    """Pages of events after ``cursor``, oldest first; raises LogGap if any were trimmed."""
    after: StreamId | None = parse_id(cursor)
    if after is None:
        raise LogGap(await log_tail(client))
    while True:
        last, trimmed, oldest, rows = await client.eval(
            _READ_LUA, 1, LOG_KEY, format_id(after), PAGE_SIZE)
        last_sid = parse_id(last)
        assert last_sid is not None
        if _missed_beyond_log(after, last_sid, bool(trimmed), oldest):
            raise LogGap(str(last))
        events = [decode(event_id, dict(zip(fields[::2], fields[1::2], strict=True))["e"])
                  for event_id, fields in rows]
        if len(events) < PAGE_SIZE:
            yield Page(events=events, read_to=str(last))
            return
        after = events[-1].sid
        yield Page(events=events, read_to=events[-1].id)
