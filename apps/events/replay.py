"""Reading the replay log from async code: what a reconnecting client missed, or a gap."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import redis.asyncio as aioredis

from .bus import LOG_KEY
from .types import Event, StreamId, decode, format_id, parse_id

# One round trip, atomic: the log's newest id, the newest id trimmed away, and a page after
# the cursor. A cursor older than the newest trimmed id means events were lost to the bound.
_READ_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'0-0', '0-0', {}} end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local last, deleted = '0-0', '0-0'
for i = 1, #info, 2 do
  if info[i] == 'last-generated-id' then last = info[i + 1] end
  if info[i] == 'max-deleted-entry-id' then deleted = info[i + 1] end
end
local page = {}
if tonumber(ARGV[2]) > 0 then
  page = redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])
end
return {last, deleted, page}
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
    last, _deleted, _page = await client.eval(_READ_LUA, 1, LOG_KEY, "0-0", 0)
    return str(last)


async def log_after(client: aioredis.Redis, *, cursor: str) -> AsyncIterator[Page]:
    """Pages of events after ``cursor``, oldest first; raises LogGap if any were trimmed."""
    after: StreamId | None = parse_id(cursor)
    if after is None:
        raise LogGap(await log_tail(client))
    while True:
        last, deleted, rows = await client.eval(_READ_LUA, 1, LOG_KEY, format_id(after), PAGE_SIZE)
        last_sid, deleted_sid = parse_id(last), parse_id(deleted)
        assert last_sid is not None and deleted_sid is not None
        if after > last_sid or deleted_sid > after:
            raise LogGap(str(last))  # a reset log (ids from the future) or a trimmed range
        events = [decode(event_id, dict(zip(fields[::2], fields[1::2]))["e"])
                  for event_id, fields in rows]
        if len(events) < PAGE_SIZE:
            yield Page(events=events, read_to=str(last))
            return
        after = events[-1].sid
        yield Page(events=events, read_to=events[-1].id)
