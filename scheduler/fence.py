"""The fence: every write a leading beat makes runs in Redis only if the lock still holds its token.

Each write is one Lua script that reads the lock and the server's clock, then either writes or
changes nothing. That makes the lock's token a fencing token in Kleppmann's sense, checked by
the storage itself at the moment the write lands: a write that was delayed in the network, or
sent by a process that was frozen, arrives after the lock moved and is refused, however late
it comes. Every call also carries the client's deadline (the moment it gives up waiting, never
later than its lease), checked against Redis ``TIME``: a request the leader has given up on
changes nothing when it finally lands. See adr/0016-fence-every-beat-write-in-redis.md.

Every write that lands appends a line to a capped journal (``<prefix>:journal``): who was
elected, renewed, fired which slot, released; in Redis's own order, with Redis's clock. The
network-fault tests judge a run from it (``scheduler.lease.read_journal``); an operator can
read it with ``LRANGE platform:beat::journal -20 -1``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

# Lines kept in the journal: at one renewal a second, about three hours of history.
JOURNAL_MAX = 10_000

_CLOCK = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function journal(key, line, max)
  if line ~= '' then
    redis.call('RPUSH', key, line .. ' ' .. now)
    redis.call('LTRIM', key, -tonumber(max), -1)
  end
end
"""

# KEYS: lock, journal, leader hash. ARGV: token, expiry (Unix ms, the caller's send time +
# the lock timeout), deadline ms, journal max, line, earliest ms (the caller's send time less
# the clock offset it may have).
# {1, 0} = taken; {0, ms} = another beat holds it for ms more (the standby's next poll need
# not wait longer); {-1, 0} = arrived after the caller gave up, not taken; {-3, 0} = sent by a
# clock ahead of Redis's beyond the bound, not taken.
ACQUIRE = _CLOCK + """
if now > tonumber(ARGV[3]) then return {-1, 0} end
if now < tonumber(ARGV[6]) then return {-3, 0} end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PXAT', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
redis.call('HSET', KEYS[3], 'token', ARGV[1], 'since', string.format('%.3f', now / 1000))
journal(KEYS[2], ARGV[5], ARGV[4])
return {1, 0}
"""

# KEYS: lock, journal. ARGV: token, deadline ms, journal max, earliest ms (the send time
# less the clock offset the caller may have: a write landing before it was sent by a clock
# ahead of Redis's beyond the bound); then a count of conditions and, for each, a hash key,
# a field and the value it must hold ('' also matches an absent field); then a count of
# journal lines and the lines; then the commands, each a word count followed by that many
# words (command name first). The conditions make a write a compare-and-set: a copy of it
# that lands twice, or after a newer one, changes nothing.
# 1 = written, 0 = the lock is not ours, -1 = past the deadline, -2 = a condition failed,
# -3 = the caller's clock is ahead beyond the bound.
WRITE = _CLOCK + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if now > tonumber(ARGV[2]) then return -1 end
if now < tonumber(ARGV[4]) then return -3 end
local i = 6
for _ = 1, tonumber(ARGV[5]) do
  if (redis.call('HGET', ARGV[i], ARGV[i + 1]) or '') ~= ARGV[i + 2] then return -2 end
  i = i + 3
end
local lines = tonumber(ARGV[i])
local first_line = i + 1
i = i + lines + 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  redis.call(unpack(ARGV, i + 1, i + n))
  i = i + n + 1
end
for j = first_line, first_line + lines - 1 do journal(KEYS[2], ARGV[j], ARGV[3]) end
return 1
"""

# KEYS: lock, journal. ARGV: token, journal max, line. 1 = released, 0 = not ours.
RELEASE = _CLOCK + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
journal(KEYS[2], ARGV[3], ARGV[2])
return 1
"""

Command = Sequence[Any]
# The scripts' refusal codes, by name.
_REFUSALS = MappingProxyType({0: "moved", -1: "late", -2: "stale", -3: "clock"})


class FenceRefused(Exception):
    """Redis refused a fenced write; ``reason`` says why, and nothing was written."""

    def __init__(self, code: int, what: str) -> None:
        self.reason = _REFUSALS.get(code, f"code {code}")
        why = self.reason
        if self.reason == "clock":
            why = "clock: this host's clock is ahead of Redis's beyond the bound, adr/0044"
        super().__init__(f"{what}: refused by Redis ({why})")


@dataclass(frozen=True)
class Condition:
    """The write lands only if this hash field still holds ``expected`` ('' = absent)."""

    key: str
    field: str
    expected: str


def recorded(client: Any, build: Callable[[Any], None]) -> list[Command]:
    """The commands ``build`` queues on a redis-py pipeline, as words, without sending them.

    Reuses redis-py's own argument building (mappings, flags) for the commands a script runs.
    """
    pipe = client.pipeline(transaction=False)
    build(pipe)
    commands = [tuple(args) for args, _options in pipe.command_stack]
    pipe.reset()
    return commands


def flatten(commands: Iterable[Command]) -> list[Any]:
    words: list[Any] = []
    for command in commands:
        words.append(len(command))
        words.extend(command)
    return words


def ms(seconds: float) -> int:
    return int(seconds * 1000)


def journal_line(kind: str, token: str, sent: float, detail: str = "-") -> str:
    """``<kind> <token> <sent ms, client clock> <detail>``; Redis appends its own ms."""
    return f"{kind} {token} {ms(sent)} {detail}"


@dataclass(frozen=True)
class JournalEntry:
    kind: str  # elected | renewed | probed | fired | installed | pruned | released
    token: str
    sent: float  # the client's clock when it sent the write, seconds
    detail: str  # "<job>|<slot>" for fired, "-" otherwise
    at: float  # Redis's clock when the write landed, seconds


def parse_journal(lines: Iterable[str]) -> list[JournalEntry]:
    entries = []
    for line in lines:
        kind, token, sent, detail, at = line.split(" ")
        entries.append(JournalEntry(kind, token, int(sent) / 1000, detail, int(at) / 1000))
    return entries
