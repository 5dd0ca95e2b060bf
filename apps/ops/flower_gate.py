"""The workers' task events on only while someone views Flower, through public interfaces only.

``manage.py flower`` runs Flower's own command with ``--enable_events=False``: Flower then never
sends ``enable_events`` (that option stops only its 5 s enable timer; it still consumes the
event stream, worker heartbeats included, and still sends ``inspect`` broadcasts when a page
asks). The platform switches events itself (adr/0036):

- **A viewer is seen in Tornado's ``tornado.access`` log.** Tornado logs every finished request
  of the Flower it serves there ("<status> <method> <uri> (<ip>) <ms>ms"); ``AccessWatch`` is a
  logging handler on that logger in the same process. A viewer is a GET answered 2xx on any
  path but those that need no login (``/metrics``, ``/healthcheck``, ``/static/``, ``/login``):
  a 401 (refused basic auth), a redirect to the login, a 404 and an OPTIONS are nobody.
  Flower's dashboard polls its API every second while open; its other pages call it on each
  click.
- **The switch is Celery's public control API**, from a thread of this process
  (``EventSwitch``): ``app.control.enable_events()`` at once on the first view and every tick
  while viewed (workers started since get them too); ``disable_events()`` once when
  ``FLOWER_VIEWER_IDLE_S`` has passed without a view, and once at start (a Flower killed while
  viewed leaves them on).

Nothing of Flower is patched and no Flower version is checked: any release that keeps its
documented ``--enable_events`` option and serves through Tornado works. A line in the access
log that cannot be read is logged once and counts as nobody: events stay off, never on for good.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from kombu.exceptions import OperationalError

logger = logging.getLogger(__name__)

# Tornado's access log: web.Application.log_request writes "%d %s %.2fms" (status, request
# summary "METHOD URI (remote ip)", time) to this logger, at INFO below 400.
ACCESS_LOGGER = "tornado.access"
ACCESS_LINE = re.compile(r"^(?P<status>\d{3}) (?P<method>[A-Z]+) (?P<uri>\S+) \(")
# Flower's paths that answer without a login: a monitor's scrape or a static file is nobody.
OPEN_PATHS = ("/metrics", "/healthcheck", "/static/", "/login", "/logout", "/favicon.ico")
# How often the switch re-sends enable_events while someone views Flower: as Flower's own
# timer did (events_enable_interval, 5 s), so a worker started meanwhile gets events that soon.
TICK_S = 5.0


class ViewerGate:
    """When a viewer was last seen, and what the next tick should broadcast.

    ``viewed`` is called from Flower's IO loop thread, the rest from the switch's thread; a
    lock keeps the two consistent.
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
        self.lock = threading.Lock()
        self.woken = threading.Event()  # a first view: switch on now, not at the next tick

    def viewed(self) -> None:
        with self.lock:
            self.last_viewed = self.clock()
            if not self.events_on:
                self.woken.set()

    def watched(self) -> bool:
        with self.lock:
            return self._watched()

    def next_command(self) -> str | None:
        """``"enable_events"``, ``"disable_events"`` or None (send nothing) for this tick."""
        with self.lock:
            if self._watched():
                # Every tick while watched: workers started since get events too.
                self.events_on = True
                return "enable_events"
            if self.events_on:
                self.events_on = False
                return "disable_events"
            return None

    def failed(self, command: str) -> None:
        """``command`` did not reach the broker: a disable is tried again on the next tick."""
        if command == "disable_events":
            with self.lock:
                self.events_on = True

    def _watched(self) -> bool:
        return (self.last_viewed is not None
                and self.clock() - self.last_viewed < self.idle_seconds)


def is_view(line: str, *, url_prefix: str = "") -> bool | None:
    """Whether an access-log line is someone viewing Flower; None when it cannot be read."""
    match = ACCESS_LINE.match(line)
    if match is None:
        return None
    status = int(match["status"])
    path = match["uri"].split("?", 1)[0]
    prefix = "/" + url_prefix.strip("/") if url_prefix.strip("/") else ""
    if prefix and path.startswith(prefix):
        path = path[len(prefix):] or "/"
    # GET only: Flower answers OPTIONS with 204 to anyone, and its POSTs are actions, not views.
    return (match["method"] == "GET" and 200 <= status < 300
            and not path.startswith(OPEN_PATHS))


class AccessWatch(logging.Handler):
    """A handler on ``tornado.access`` that tells the gate of each view."""

    def __init__(self, gate: ViewerGate, *, url_prefix: Callable[[], str] = lambda: "") -> None:
        super().__init__(level=logging.INFO)
        self.gate = gate
        self.url_prefix = url_prefix
        self.unreadable_logged = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = record.getMessage()
            view = is_view(line, url_prefix=self.url_prefix())
        except Exception:  # a handler must never raise into Tornado's request path
            self.handleError(record)
            return
        if view is None:
            if not self.unreadable_logged:
                self.unreadable_logged = True
                logger.error("viewer gate: cannot read Tornado's access log line %.200r; "
                             "Flower's viewers are not seen and task events stay off", line)
            return
        if view:
            self.gate.viewed()


class EventSwitch(threading.Thread):
    """Sends the gate's commands through ``control`` (a Celery app's ``app.control``)."""

    def __init__(self, gate: ViewerGate, control: Any, *, tick_s: float = TICK_S) -> None:
        super().__init__(name="flower-event-switch", daemon=True)
        self.gate = gate
        self.control = control
        self.tick_s = tick_s

    def run(self) -> None:
        while True:
            self.tick()
            self.gate.woken.wait(self.tick_s)
            self.gate.woken.clear()

    def tick(self) -> None:
        command = self.gate.next_command()
        if command is None:
            return
        try:
            getattr(self.control, command)()  # enable_events() or disable_events()
        except (OperationalError, OSError) as exc:  # broker unreachable: try again later
            logger.warning("viewer gate: %s failed: %s", command, exc)
            self.gate.failed(command)
            return
        last = self.gate.last_viewed
        logger.info("viewer gate: %s sent (viewer last seen %s)", command,
                    "never" if last is None else f"{self.gate.clock() - last:.1f} s ago")


def watch_viewers(gate: ViewerGate, control: Any,
                  *, url_prefix: Callable[[], str] = lambda: "") -> EventSwitch:
    """Watch Flower's access log and start switching; call before Flower's command runs."""
    access = logging.getLogger(ACCESS_LOGGER)
    # Tornado writes 2xx lines at INFO; a quieter root level (FLOWER_LOGGING=warning, set by
    # Tornado's option parsing after this) must not drop them before this handler. Flower, out
    # of debug mode, stops the logger propagating, so nothing more is printed.
    access.setLevel(logging.INFO)
    access.addHandler(AccessWatch(gate, url_prefix=url_prefix))
    switch = EventSwitch(gate, control)
    switch.start()
    return switch
