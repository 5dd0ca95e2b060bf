"""Flower that switches the workers' task events on only while someone is looking at it.

Flower 2.2.0, while it runs, sends ``enable_events`` to every worker every 5 s
(``flower.events.Events.on_enable_events`` on a timer of ``events_enable_interval`` ms) and
never ``disable_events``: the workers pay for task events all the time, whether or not anyone
looks (adr/0015, adr/0022). ``manage.py flower`` starts the same Flower with two hooks, both
installed by ``install`` below and nowhere else:

- every request Flower authenticates (``flower.views.BaseHandler.get_current_user`` returning
  a user: basic auth or OAuth as configured) stamps the time a viewer was last seen. Flower's
  dashboard polls its API every second while open; other pages call it on each click;
- Flower's periodic ``enable_events`` is sent only while a viewer was seen within the idle
  window; on the first tick after the window lapses it broadcasts ``disable_events`` once (and
  once at start, for events a previous Flower left on).

A third hook, under Sentinel only (``install_broker_client``): Flower's Broker tab (and its
queue-length API) builds its Redis client from ``conn.as_uri()``, which keeps only the first
``sentinel://`` address of the broker URL, so with that one sentinel down the queue view
failed. The hook gives it the platform's own client of the current primary
(``celery_conf.connections.async_client``), which asks every sentinel, and closes that
client's sentinel connections after each read.

tests/ops/test_flower_gate.py fails if the pinned Flower's internals these rely on change.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import flower
from flower.events import Events
from flower.utils.broker import RedisSentinel
from flower.views import BaseHandler
from kombu.exceptions import OperationalError

from celery_conf.connections import RedisTarget, async_client, async_close

logger = logging.getLogger(__name__)

# The hooks below replace two methods of this exact release (requirements.txt pins it).
FLOWER_VERSION = "2.2.0"


class ViewerGate:
    """When a viewer was last seen, and what the next timer tick should broadcast.

    Touched only from Flower's IO loop thread (its request handlers and its timer), so it
    needs no lock.
    """

    def __init__(self, *, idle_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if idle_seconds <= 0:
            raise ValueError(f"idle_seconds must be positive, got {idle_seconds!r}")
        self.idle_seconds = idle_seconds
        self.clock = clock
        self.last_viewed: float | None = None
        # Unknown at start: a Flower killed while watched leaves the workers' events on.
        # Assuming "on" makes the first tick switch them off.
        self.events_on = True

    def viewed(self) -> None:
        self.last_viewed = self.clock()

    def watched(self) -> bool:
        return (self.last_viewed is not None
                and self.clock() - self.last_viewed < self.idle_seconds)

    def next_command(self) -> str | None:
        """``"enable_events"``, ``"disable_events"`` or None (send nothing) for this tick."""
        if self.watched():
            # Every tick while watched, as Flower does: workers started since get events too.
            self.events_on = True
            return "enable_events"
        if self.events_on:
            self.events_on = False
            return "disable_events"
        return None


def install(gate: ViewerGate) -> None:
    """Hook ``gate`` into Flower's classes; call before Flower's app is built (manage.py flower)."""
    if flower.__version__ != FLOWER_VERSION:
        raise RuntimeError(f"apps/ops/flower_gate.py hooks Flower {FLOWER_VERSION}; "
                           f"installed: {flower.__version__}. Re-read its internals first.")
    authenticate = BaseHandler.get_current_user

    def get_current_user(handler: BaseHandler) -> Any:
        user = authenticate(handler)  # raises 401 on bad basic auth: no stamp then
        if user:
            gate.viewed()
        return user

    async def on_enable_events(events: Events) -> None:
        command = gate.next_command()
        if command is None:
            return
        try:
            await events.io_loop.run_in_executor(None, getattr(events.capp.control, command))
        except (OperationalError, OSError) as exc:  # broker unreachable: as Flower's own
            logger.warning("viewer gate: %s failed: %s", command, exc)
            if command == "disable_events":
                gate.events_on = True  # try again on the next tick
            return
        logger.info("viewer gate: %s sent (viewer last seen %s)", command,
                    "never" if gate.last_viewed is None
                    else f"{gate.clock() - gate.last_viewed:.1f} s ago")

    BaseHandler.get_current_user = get_current_user
    # Events.__init__ binds self.on_enable_events into its PeriodicCallback: patched before
    # Flower builds its Events, every tick of Flower's own timer goes through the gate.
    Events.on_enable_events = on_enable_events


def install_broker_client(target: RedisTarget) -> None:
    """Under Sentinel, Flower's Broker reads queue lengths through every sentinel of
    ``target`` instead of the broker URL's first one. A single Redis needs nothing."""
    if not target.sentinel:
        return
    read_queues = RedisSentinel.queues

    def _get_redis_client(broker: RedisSentinel, broker_options: dict[str, Any],
                          broker_use_ssl: Any) -> Any:
        return async_client(target, timeout=broker.socket_timeout)

    async def queues(broker: RedisSentinel, names: Any) -> list[dict[str, Any]]:
        try:
            return await read_queues(broker, names)
        finally:
            await async_close(broker.redis)  # and its sockets to the sentinels

    RedisSentinel._get_redis_client = _get_redis_client
    RedisSentinel.queues = queues
