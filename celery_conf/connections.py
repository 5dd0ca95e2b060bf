"""Every Redis connection of the platform, derived from one ``RedisTarget`` (``settings.REDIS``).

One Redis (``REDIS_URL``) or a Sentinel group (``REDIS_SENTINELS``, ``REDIS_SENTINEL_MASTER``),
with or without TLS: this module turns that choice into the sync redis-py client, the event
hub's asyncio clients, the Celery broker's URL and options (which Flower reads too), RedBeat's
URL and options, and the elected beat's bounded client. Every timeout lives here, once, with
its reason. Under Sentinel every client asks the sentinels for the current primary whenever it
opens a connection, so after a failover the next connection lands on the new primary; a client
never holds a list of Redis servers of its own (adr/0025).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import quote, urlsplit

import redis
import redis.asyncio as aioredis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelPool
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

# --- timeouts, each with its reason -------------------------------------------------------
# A command of the web, worker or ops code that hangs this long means a dead link or a primary
# that is gone: the request fails (503) instead of holding its thread. Five seconds is far
# above any command's time on a live Redis (milliseconds) and well below a proxy's 30-60 s.
COMMAND_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 5.0
# One question to one sentinel ("who is the primary?"). A sentinel that does not answer within
# this is skipped for the next one in the list, so one dead or frozen sentinel costs a client
# at most this much once per new connection, never a failed command.
SENTINEL_TIMEOUT_S = 1.0
# The elected beat: connect and command timeouts of one renewal interval and no retry inside a
# tick, so every call ends well inside the 5 s lock (adr/0017; scheduler/settings.py).
BEAT_CALL_TIMEOUT_S = 1.0
BEAT_RETRIES = 0
# The hub's replay reads: one short script per page; a reconnect storm queues for a pooled
# connection this long at most before the stream answers "resync".
LOG_READ_TIMEOUT_S = 10.0
LOG_POOL_WAIT_S = 10.0
# Redis connections per web worker for replay reads: a thousand streams reconnecting at once
# share these instead of opening one socket each.
LOG_CONNECTIONS = 4
# The broker connection PINGs when idle this long: a dead primary is noticed within seconds,
# not at the next TCP timeout, and the consumer reconnects (through the sentinels).
BROKER_HEALTH_CHECK_S = 10
# The platform's redis.conf keeps Redis's default number of databases.
REDIS_DATABASES = 16


@dataclass(frozen=True)
class RedisTarget:
    """Where the platform's one Redis is: a URL, or a Sentinel group with its passwords."""

    # Passwords stay out of repr(): the target sits in Django's and Celery's settings.
    url: str = field(default="", repr=False)  # redis:// or rediss://, when there is no Sentinel
    sentinels: tuple[tuple[str, int], ...] = ()
    master: str = ""
    password: str = field(default="", repr=False)  # the data password, Sentinel mode
    sentinel_password: str = field(default="", repr=False)
    db: int = 0
    tls: bool = False  # Sentinel mode; a single Redis says it with rediss://
    ca_file: str = ""

    @property
    def sentinel(self) -> bool:
        return bool(self.sentinels)

    @property
    def uses_tls(self) -> bool:
        return self.tls or self.url.startswith("rediss://")

    @property
    def data_password(self) -> str:
        return self.password if self.sentinel else (urlsplit(self.url).password or "")

    def describe(self) -> str:
        """Where it points, without passwords: for ``manage.py status`` and logs."""
        if self.sentinel:
            hosts = ",".join(f"{_url_host(h)}:{p}" for h, p in self.sentinels)
            return f"sentinel {self.master}@{hosts}/{self.db}" + (" tls" if self.tls else "")
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{_url_host(parts.hostname)}:{parts.port}{parts.path}"


def _url_host(host: str | None) -> str:
    """A host as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if host and ":" in host else str(host)


def redis_target(*, url: str, sentinels: list[str], master: str, password: str,
                 sentinel_password: str, db: int, tls: bool, ca_file: str) -> RedisTarget:
    """The target the settings describe. Bad input raises ImproperlyConfigured at start-up."""
    if ca_file and not ca_file.startswith("/"):
        raise ImproperlyConfigured(f"REDIS_TLS_CA_FILE must be an absolute path, got {ca_file!r}")
    # Redis numbers its databases from 0 to `databases - 1` (16 by default): a negative number
    # is never valid, and one past the server's count fails only at the first command.
    if not 0 <= db < REDIS_DATABASES:
        raise ImproperlyConfigured(
            f"REDIS_DB must be between 0 and {REDIS_DATABASES - 1}, got {db}")
    if not sentinels:
        if urlsplit(url).scheme not in ("redis", "rediss"):
            raise ImproperlyConfigured(
                f"REDIS_URL must be redis:// or rediss://, got {urlsplit(url).scheme!r}")
        return RedisTarget(url=url, ca_file=ca_file)
    hosts = []
    for item in sentinels:
        host, _, port = item.rpartition(":")
        bracketed = host.startswith("[") and host.endswith("]")
        if bracketed:
            host = host[1:-1]  # an IPv6 address, written [::1]:26379 as in a URL
        if (not host or "[" in host or "]" in host or (":" in host and not bracketed)
                or not port.isdigit()
                or not 0 < int(port) < 65536):
            raise ImproperlyConfigured(
                f"REDIS_SENTINELS must be host:port,host:port,... ([v6addr]:port for IPv6), "
                f"got {item!r}")
        hosts.append((host, int(port)))
    if not master:
        raise ImproperlyConfigured("REDIS_SENTINEL_MASTER must name the Sentinel master group")
    return RedisTarget(sentinels=tuple(hosts), master=master, password=password,
                       sentinel_password=sentinel_password, db=db, tls=tls, ca_file=ca_file)


# --- TLS ---------------------------------------------------------------------------------
def _tls_kwargs(target: RedisTarget) -> dict[str, Any]:
    """redis-py's TLS arguments: certificates verified, against the CA file when given."""
    if not target.uses_tls:
        return {}
    kwargs: dict[str, Any] = {"ssl": True, "ssl_cert_reqs": "required"}
    if target.ca_file:
        kwargs["ssl_ca_certs"] = target.ca_file
    return kwargs


def _sentinel_kwargs(target: RedisTarget, *, timeout: float,
                     asynchronous: bool = False) -> dict[str, Any]:
    """How a client talks to the sentinels themselves: their password, short timeouts."""
    kwargs: dict[str, Any] = {
        "socket_timeout": min(timeout, SENTINEL_TIMEOUT_S),
        "socket_connect_timeout": min(timeout, SENTINEL_TIMEOUT_S),
        # The next sentinel is the retry (redis-py's asyncio clients take their own class).
        "retry": (AsyncRetry if asynchronous else Retry)(NoBackoff(), 0),
    }
    if target.sentinel_password:
        kwargs["password"] = target.sentinel_password
    return kwargs | _tls_kwargs(target)


# --- sync clients --------------------------------------------------------------------------
def sync_client(target: RedisTarget, *, timeout: float = COMMAND_TIMEOUT_S,
                connect_timeout: float = CONNECT_TIMEOUT_S, retries: int | None = None,
                decode_responses: bool = True) -> redis.Redis:
    """A redis-py client of the current primary. ``retries=None`` keeps redis-py's default
    (3, with backoff): a command that meets a dropped connection reconnects, through the
    sentinels, to whichever server is primary by then."""
    kwargs: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": connect_timeout,
                              "decode_responses": decode_responses}
    if retries is not None:
        kwargs["retry"] = Retry(NoBackoff(), retries)
    if not target.sentinel:
        tls = _tls_kwargs(target)
        tls.pop("ssl", None)  # the scheme says it
        return redis.Redis.from_url(target.url, **kwargs, **tls)
    sentinel = Sentinel(list(target.sentinels),
                        sentinel_kwargs=_sentinel_kwargs(target, timeout=timeout),
                        password=target.password or None, db=target.db,
                        **kwargs, **_tls_kwargs(target))
    return sentinel.master_for(target.master)


def clock_offset(client: redis.Redis) -> tuple[float, float]:
    """(this host's wall clock minus Redis's ``TIME``, the round trip), seconds: the offset
    is known to within half the round trip. Beats and workers compare clocks through it
    (adr/0044): Redis's clock is the one every fence and expiry is judged by."""
    before = time.time()
    seconds, micros = client.time()
    after = time.time()
    return (before + after) / 2 - (int(seconds) + int(micros) / 1e6), after - before


def clock_beyond(client: redis.Redis, bound: float) -> float | None:
    """The clock offset if it is certainly (whatever the round trip hides) beyond ``bound``;
    None otherwise."""
    offset, round_trip = clock_offset(client)
    return offset if abs(offset) - round_trip / 2 > bound else None


@cache
def redis_client() -> redis.Redis:
    """This process's client of the platform's Redis (one pool per process, cached)."""
    return sync_client(settings.REDIS)


def beat_client(target: RedisTarget) -> redis.Redis:
    """The elected beat's client: bounded calls, never retried inside a tick (adr/0017)."""
    return sync_client(target, timeout=BEAT_CALL_TIMEOUT_S, connect_timeout=BEAT_CALL_TIMEOUT_S,
                       retries=BEAT_RETRIES)


# --- asyncio clients (the event hub) -------------------------------------------------------
class _BlockingSentinelPool(AsyncSentinelPool, aioredis.BlockingConnectionPool):
    """Sentinel's primary discovery with the blocking pool's bound on connections."""


def _async_primary(target: RedisTarget, *, timeout: float,
                   **kwargs: Any) -> tuple[aioredis.Redis, AsyncSentinel | None]:
    """An asyncio client of ``target``'s primary: the URL's server, or whichever server the
    sentinels name at each connect (asked with ``timeout`` at most), with the ``Sentinel``
    that asks them (None for a single Redis): closing the client leaves the sentinels'
    connections open, closing the ``Sentinel`` closes them."""
    if not target.sentinel:
        tls = _tls_kwargs(target)
        tls.pop("ssl", None)  # the scheme says it
        return aioredis.Redis.from_url(target.url, **kwargs, **tls), None
    sentinel = AsyncSentinel(list(target.sentinels),
                             sentinel_kwargs=_sentinel_kwargs(target, timeout=timeout,
                                                              asynchronous=True),
                             password=target.password or None, db=target.db,
                             **kwargs, **_tls_kwargs(target))
    return sentinel.master_for(target.master), sentinel


@asynccontextmanager
async def async_subscriber(target: RedisTarget) -> AsyncIterator[aioredis.Redis]:
    """The hub's pub/sub client, closed on leaving with its connections to the sentinels (the
    hub makes a new one at every reconnect; each would otherwise leave one socket open per
    sentinel asked). No transparent reconnect (a silent resubscribe would hide the events
    missed meanwhile; the hub resyncs its streams instead), no command timeout (a
    subscription waits for messages; the hub PINGs it)."""
    client, sentinel = _async_primary(target, timeout=CONNECT_TIMEOUT_S, decode_responses=True,
                                      retry=AsyncRetry(NoBackoff(), 0),
                                      socket_connect_timeout=CONNECT_TIMEOUT_S,
                                      socket_keepalive=True)
    try:
        yield client
    finally:
        try:
            await client.aclose()
        finally:
            if sentinel is not None:
                await sentinel.aclose()


def async_log_client(target: RedisTarget) -> aioredis.Redis:
    """The hub's pooled client for replay reads and its status report: a bounded pool."""
    kwargs: dict[str, Any] = {"decode_responses": True, "socket_timeout": LOG_READ_TIMEOUT_S,
                              "socket_connect_timeout": CONNECT_TIMEOUT_S,
                              "max_connections": LOG_CONNECTIONS, "timeout": LOG_POOL_WAIT_S}
    if not target.sentinel:
        tls = _tls_kwargs(target)
        tls.pop("ssl", None)
        pool = aioredis.BlockingConnectionPool.from_url(target.url, **kwargs, **tls)
        return aioredis.Redis(connection_pool=pool)
    sentinel = AsyncSentinel(list(target.sentinels),
                             sentinel_kwargs=_sentinel_kwargs(target, timeout=CONNECT_TIMEOUT_S,
                                                              asynchronous=True))
    return sentinel.master_for(target.master, connection_pool_class=_BlockingSentinelPool,
                               password=target.password or None, db=target.db,
                               **kwargs, **_tls_kwargs(target))


# --- Celery's broker (workers, web publishes, Flower) and RedBeat -------------------------
def broker_url(target: RedisTarget) -> str:
    """kombu's URL: the Redis URL, or one ``sentinel://`` per sentinel joined by ``;`` with
    the data password (kombu uses the first URL's password for the primary)."""
    if not target.sentinel:
        return target.url
    auth = f":{quote(target.password, safe='')}@" if target.password else ""
    # An IPv6 address in brackets, as a URL needs it (kombu's parser takes them off again).
    return ";".join(f"sentinel://{auth}{f'[{host}]' if ':' in host else host}:{port}/{target.db}"
                    for host, port in target.sentinels)


def broker_connection_options(target: RedisTarget) -> dict[str, Any]:
    """The target's part of ``broker_transport_options``, plus ``broker_use_ssl``."""
    options: dict[str, Any] = {
        "health_check_interval": BROKER_HEALTH_CHECK_S,
        # kombu passes None (no timeout) unless told: a publish to a primary that is frozen,
        # or whose host vanished without a reset, would hang the web request until the
        # primary came back (measured: the whole failover, then a 202 from the old primary).
        # With it the publish fails, is retried through the sentinels, or answers 503. The
        # worker's BRPOP waits 1 s at most (kombu's polling interval), well inside it.
        "socket_timeout": COMMAND_TIMEOUT_S,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
    }
    if target.sentinel:
        options["master_name"] = target.master
        options["sentinel_kwargs"] = _sentinel_kwargs(target, timeout=SENTINEL_TIMEOUT_S)
    return {"transport_options": options, "use_ssl": _kombu_ssl(target)}


def _kombu_ssl(target: RedisTarget) -> dict[str, Any] | None:
    if not target.uses_tls:
        return None
    options: dict[str, Any] = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    if target.ca_file:
        options["ssl_ca_certs"] = target.ca_file
    return options


def redbeat_connection_settings(target: RedisTarget) -> dict[str, Any]:
    """``redbeat_redis_url``, ``redbeat_redis_options``, ``redbeat_redis_use_ssl``.

    Plain RedBeat builds its client from these; the platform's fenced scheduler uses
    ``beat_client`` instead (RedBeat's Sentinel branch drops the connect timeout and the
    no-retry policy, and builds a new pool on every call).
    """
    base = {"socket_timeout": BEAT_CALL_TIMEOUT_S,
            "socket_connect_timeout": BEAT_CALL_TIMEOUT_S,
            "retry": Retry(NoBackoff(), BEAT_RETRIES)}
    if not target.sentinel:
        return {"redbeat_redis_url": target.url, "redbeat_redis_options": base,
                "redbeat_redis_use_ssl": _kombu_ssl(target)}
    options = {"sentinels": list(target.sentinels), "service_name": target.master,
               "password": target.password or None, "db": target.db,
               "socket_timeout": BEAT_CALL_TIMEOUT_S,
               "sentinel_kwargs": _sentinel_kwargs(target, timeout=BEAT_CALL_TIMEOUT_S)}
    return {"redbeat_redis_url": f"redis-sentinel://{target.master}",
            "redbeat_redis_options": options, "redbeat_redis_use_ssl": _kombu_ssl(target)}


def connection_settings(target: RedisTarget) -> dict[str, Any]:
    """Every Celery and RedBeat setting that says where Redis is (unprefixed names)."""
    broker = broker_connection_options(target)
    return {"broker_url": broker_url(target),
            "broker_transport_options": broker["transport_options"],
            "broker_use_ssl": broker["use_ssl"],
            **redbeat_connection_settings(target)}
