"""The beat's broker transport: kombu's Redis transport, except that publishing writes nothing.

``FencedChannel._put`` lets kombu build the exact Redis commands it would send for a message
(the ``LPUSH`` of the serialized message to the queue's list, priority suffix and queue
expiry included: the same path kombu's own publish batches use) and hands them to the
caller instead of running them. The scheduler then runs them inside the fence's script,
together with the slot's last-run update, so the push happens only if the lock still holds
the leader's token when it lands (scheduler/fence.py). A publish outside ``collecting()``
is a bug and raises rather than pushing unfenced.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis as kombu_redis

from .fence import Command


class UnfencedPublish(RuntimeError):
    """The beat tried to push a message outside a fenced write."""


class _Sink:
    """Stands in for kombu's PublishBatch: receives the final commands of one message."""

    def __init__(self, commands: list[Command]) -> None:
        self.commands = commands

    def add(self, name: str, *args: Any) -> None:
        self.commands.append((name.upper(), *args))


class FencedChannel(kombu_redis.Channel):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._outbox: list[Command] | None = None
        super().__init__(*args, **kwargs)

    @contextmanager
    def collecting(self) -> Iterator[list[Command]]:
        """Publishes inside this block yield their Redis commands here, unsent."""
        self._outbox = []
        try:
            yield self._outbox
        finally:
            self._outbox = None

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        if self._outbox is None:
            raise UnfencedPublish(f"publish to {queue!r} outside the beat's fence")
        kwargs.pop("_publish_batch", None)
        super()._put(queue, message, _publish_batch=_Sink(self._outbox), **kwargs)

    def _put_fanout(self, exchange: str, message: Any, routing_key: str, **kwargs: Any) -> None:
        raise UnfencedPublish("the beat publishes to queues only, never to a fanout exchange")


class FencedTransport(kombu_redis.Transport):
    Channel = FencedChannel


class FencedSentinelChannel(FencedChannel, kombu_redis.SentinelChannel):
    """The same, on kombu's Sentinel channel: its connections go to the current primary."""


class FencedSentinelTransport(kombu_redis.SentinelTransport):
    Channel = FencedSentinelChannel


def fenced_transport(*, sentinel: bool) -> type[kombu_redis.Transport]:
    return FencedSentinelTransport if sentinel else FencedTransport
