"""Settings shared by every environment. Values come from the environment variables below.

Development defaults live in ``development.py``; ``production.py`` requires every secret.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from celery_conf import policy
from celery_conf.connections import RedisTarget, connection_settings, redis_target
from celery_conf.policy import durable_task_settings
from celery_conf.versions import UntestedRelease, versions_check
from config import hosts
from config.env import env_bool, env_float, env_int, env_list, env_str
from config.process import process_kind
from scheduler.settings import beat_settings

# Every process refuses to start on a library release the platform was not verified on
# (celery_conf/versions.py, adr/0032), unless the operator names that exact release here.
PLATFORM_ACCEPT_UNTESTED = env_list("PLATFORM_ACCEPT_UNTESTED", [])
try:
    versions_check(accept=PLATFORM_ACCEPT_UNTESTED)
except UntestedRelease as exc:
    raise ImproperlyConfigured(str(exc)) from None

BASE_DIR = Path(__file__).resolve().parents[2]
VAR_DIR = Path(env_str("PLATFORM_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = False
ALLOWED_HOSTS: list[str] = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "apps.ops",
    "apps.documents",
    "apps.events",
    "apps.notifications",
    "apps.reports",
    "apps.telemetry",
    "apps.metering",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Error answers by one rule (JSON on the API, a page otherwise), in development too; after
    # CommonMiddleware, which turns its 404 for a missing slash into a redirect.
    "apps.error_pages.ErrorPagesMiddleware",
    # Last, so it sees the views' exceptions first: a pool timeout is 503, not 500.
    "apps.ops.database_busy.DatabaseBusyMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            # {% load units %}: durations and sizes worded as commands and errors word them.
            "libraries": {"units": "apps.humanize_filters"},
        },
    },
]

# --- hosts: what this host runs and how it reaches the data host (config/hosts.py, adr/0026)
# The roles this host runs: platform/up starts, and platform/install enables, only their
# processes. Default all: one box runs everything, as before.
PLATFORM_ROLES = hosts.roles_parse(env_str("PLATFORM_ROLES", ",".join(hosts.DEFAULT_ROLES)))
# This host's name in worker node names (worker1@<name>), heartbeats and beat_status. Every
# host needs its own: two hosts cloned with one hostname would share worker names, and the
# reconciler would read one host's process ids as the other's.
PLATFORM_HOST_NAME = env_str("PLATFORM_HOST_NAME", socket.gethostname())
# The same name for the beat's lock token (scheduler/lease.py), read from Celery's config.
CELERY_PLATFORM_HOST_NAME = PLATFORM_HOST_NAME
# On: refuse to start unless Redis is reached by rediss:// and PostgreSQL with
# sslmode=verify-full or verify-ca (both verifying the private CA). Off by default here: one
# box talks over loopback, where TLS adds cost and nothing else. Production turns it on by
# default on a host without the data role (config/settings/production.py).
PLATFORM_REQUIRE_TLS = env_bool("PLATFORM_REQUIRE_TLS", False)

# --- database -------------------------------------------------------------------------------
# SQLite by default, PostgreSQL (or any dj-database-url URL) by DATABASE_URL.
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}"), conn_max_age=0
    )
}
# What kind of process this is (web, worker, beat, flower, manage): PostgreSQL shows it as each
# connection's application_name, so an operator can count connections per process type
# (SELECT application_name, count(*) FROM pg_stat_activity GROUP BY 1; README, "Database").
PROCESS_KIND = process_kind(sys.argv)
# PostgreSQL connections a web worker process holds at most (adr/0024). Django serves each
# request's sync part on a thread of its own, so without a pool a web process opens one
# connection per request in flight: measured 16 for 16 concurrent clients, however few
# processes, and max_connections (100) is reached by load alone. With the pool, requests
# beyond this many wait for a connection (DATABASE_POOL_TIMEOUT_S), and the connections are
# reused instead of paying a connect and scram-sha-256 handshake (~11 ms measured) each.
# 0 turns the pool off (one connection per request in flight; kept for the benchmark).
DATABASE_WEB_POOL_SIZE = env_int("DATABASE_WEB_POOL_SIZE", 4)
# How long a request waits for a pooled connection before it fails (503, not a hang).
DATABASE_POOL_TIMEOUT_S = env_float("DATABASE_POOL_TIMEOUT_S", 10.0)
# A pooled connection idle this long is closed: a quiet web process holds none.
DATABASE_POOL_MAX_IDLE_S = env_float("DATABASE_POOL_MAX_IDLE_S", 60.0)
# How long a PostgreSQL connection may leave data it sent unacknowledged before the kernel
# drops it (libpq's ``tcp_user_timeout``, https://www.postgresql.org/docs/current/libpq-connect.html).
# Across hosts a cut link otherwise holds a query on an established connection for the
# kernel's retransmissions, about 15 minutes: measured, a request on a web host cut from the
# data host hung past its client's 30 s (tests/partitions/test_web_cut.py, adr/0044). Not a
# query timeout: a long query's packets are acknowledged while it runs. 0 turns it off.
DATABASE_TCP_USER_TIMEOUT_S = env_float("DATABASE_TCP_USER_TIMEOUT_S", 10.0)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    options = DATABASES["default"].setdefault("OPTIONS", {})
    options["application_name"] = f"platform-{PROCESS_KIND}"
    if DATABASE_TCP_USER_TIMEOUT_S > 0:
        options["tcp_user_timeout"] = int(DATABASE_TCP_USER_TIMEOUT_S * 1000)
    if PROCESS_KIND == "web" and DATABASE_WEB_POOL_SIZE > 0:
        # Only the web: a Celery prefork pool process runs one task at a time and Celery
        # closes its connection (and any pool) after each task; beat, Flower and commands
        # hold at most one, briefly.
        # reconnect_timeout: psycopg_pool retries a failed connect with doubling delays (1,
        # 2, 4, ... s); after a long outage its next try could come minutes after the server
        # is back. Giving up after one request's wait lets the next request try at once.
        options["pool"] = {"min_size": 0, "max_size": DATABASE_WEB_POOL_SIZE,
                           "timeout": DATABASE_POOL_TIMEOUT_S,
                           "max_idle": DATABASE_POOL_MAX_IDLE_S,
                           "reconnect_timeout": DATABASE_POOL_TIMEOUT_S}
        # A pooled connection is checked (an empty query) as it is handed out: after a
        # database restart the dead ones are replaced instead of failing a request each.
        DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# How long a Celery worker's pool process keeps its database connection between tasks
# (adr/0043). Celery's Django fix-up would close it after every task (CELERY_DB_REUSE_MAX
# below turns that off; celery_conf/database.py closes it by this age instead, or at once when
# it failed): reopening costs a file open and pragmas on SQLite, a backend fork and a
# scram-sha-256 exchange on PostgreSQL (10.4 of 38 ms of CPU per document, measured). Still
# one connection per pool process at most (adr/0024), now also while idle, up to this long
# after its last task. 0: a connection per task, as before.
DATABASE_WORKER_CONN_MAX_AGE_S = env_int("DATABASE_WORKER_CONN_MAX_AGE_S", 600)
if PROCESS_KIND == "worker":
    DATABASES["default"]["CONN_MAX_AGE"] = DATABASE_WORKER_CONN_MAX_AGE_S
    # Each task's first query runs on a connection checked alive (one round trip on
    # PostgreSQL, nothing on SQLite): after a database restart the dead one is replaced.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# How long a web process's SQLite connection is kept by the thread that opened it, across
# requests. Django runs on a fixed pool of WEB_REQUEST_THREADS threads per web process
# (adr/0045), so that many connections per process at most, each reused; opening one per
# request cost a file open, Django's SQL functions registered, the pragmas and a read of the
# schema, for every request. 0: one per request, as before. PostgreSQL's web uses its pool
# (DATABASE_WEB_POOL_SIZE) instead.
DATABASE_WEB_SQLITE_CONN_MAX_AGE_S = env_int("DATABASE_WEB_SQLITE_CONN_MAX_AGE_S", 600)
if PROCESS_KIND == "web" and DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["CONN_MAX_AGE"] = DATABASE_WEB_SQLITE_CONN_MAX_AGE_S
# SQLite's durability in WAL mode (adr/0014). FULL syncs the WAL at every commit, so a row
# committed before a 202 survives a power cut; NORMAL syncs only at checkpoints and a power
# cut can roll back the last commits (https://www.sqlite.org/pragma.html#pragma_synchronous).
# NORMAL exists for loadtests/throughput_comparison.py; PostgreSQL keeps its default
# synchronous_commit=on, which is already power-cut safe.
SQLITE_SYNCHRONOUS = env_str("SQLITE_SYNCHRONOUS", "FULL")
if SQLITE_SYNCHRONOUS not in ("FULL", "NORMAL"):
    raise ImproperlyConfigured(
        f"SQLITE_SYNCHRONOUS must be FULL or NORMAL, got {SQLITE_SYNCHRONOUS!r}")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several web and worker processes write this file at once: WAL lets readers run beside
    # the writer, IMMEDIATE takes the write lock at BEGIN so two writers queue on the busy
    # timeout instead of failing mid-transaction with "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "init_command": f"PRAGMA journal_mode=WAL; PRAGMA synchronous={SQLITE_SYNCHRONOUS};",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "documents:list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

# A refused CSRF check answers like every other error: JSON on the API, a page otherwise.
CSRF_FAILURE_VIEW = "apps.error_pages.csrf_failure"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        # Celery logs two INFO lines per task ("received", "succeeded in"). At hundreds of
        # tasks a second they cost the workers about a fifth of their throughput (adr/0022);
        # a task's record is its database row, and failures still log at ERROR.
        name: {"level": env_str("CELERY_TASK_LOG_LEVEL", "WARNING")}
        for name in ("celery.app.trace", "celery.worker.strategy")
    },
}

# --- Redis: broker, RedBeat lock and schedule, event bus (celery_conf/connections.py) -----
# One Redis: REDIS_URL (redis:// or rediss://), set in development.py (with a default) and
# production.py (required). Or a Sentinel group, when REDIS_SENTINELS is set (then REDIS_URL
# is not used): the sentinels' addresses, the master group's name, the data password (primary
# and replicas) and the sentinels' own password; REDIS_TLS speaks TLS to all of them.
# REDIS_TLS_CA_FILE verifies the servers' certificates against that CA (rediss:// or
# REDIS_TLS); without it the system's CAs. Every client is derived from ``REDIS`` (adr/0025).
REDIS_URL = ""
REDIS_SENTINELS = env_list("REDIS_SENTINELS", [])
REDIS_SENTINEL_MASTER = env_str("REDIS_SENTINEL_MASTER", "platform")
REDIS_PASSWORD = env_str("REDIS_PASSWORD", "")
REDIS_SENTINEL_PASSWORD = env_str("REDIS_SENTINEL_PASSWORD", "")
REDIS_DB = env_int("REDIS_DB", 0)
REDIS_TLS = env_bool("REDIS_TLS", False)
REDIS_TLS_CA_FILE = env_str("REDIS_TLS_CA_FILE", "")
if REDIS_TLS_CA_FILE and not Path(REDIS_TLS_CA_FILE).is_file():
    # Otherwise every process starts and each Redis connection fails on its own, later.
    raise ImproperlyConfigured(
        f"REDIS_TLS_CA_FILE {REDIS_TLS_CA_FILE!r} is not a readable file")


def redis_settings(url: str) -> RedisTarget:
    """The environment's Redis (``url``, or the Sentinel group when REDIS_SENTINELS is set)."""
    return redis_target(url=url, sentinels=REDIS_SENTINELS, master=REDIS_SENTINEL_MASTER,
                        password=REDIS_PASSWORD, sentinel_password=REDIS_SENTINEL_PASSWORD,
                        db=REDIS_DB, tls=REDIS_TLS, ca_file=REDIS_TLS_CA_FILE)

# --- documents ------------------------------------------------------------------------------
# Largest document accepted, pasted or uploaded. Larger requests get 413 and create nothing.
DOCUMENTS_MAX_BYTES = env_int("DOCUMENTS_MAX_BYTES", 1024 * 1024)
# Simulated work per document (parse, extract, summarise take "a few seconds" in production).
DOCUMENTS_PROCESSING_SECONDS = float(env_str("DOCUMENTS_PROCESSING_SECONDS", "3"))
# Retries for transient failures, with exponential backoff starting at this many seconds.
DOCUMENTS_MAX_RETRIES = env_int("DOCUMENTS_MAX_RETRIES", 3)
DOCUMENTS_RETRY_BACKOFF = env_int("DOCUMENTS_RETRY_BACKOFF", 2)
# A document whose processing started this many times without finishing (its worker killed
# each time) is marked failed instead of looping forever (reject-on-worker-lost loops).
DOCUMENTS_MAX_STARTS = env_int("DOCUMENTS_MAX_STARTS", 8)
# The recovery (apps/documents/recovery.py, run by the leading beat every second) re-enqueues
# a queued document whose message is in no queue once it was queued this long before the
# queue's oldest waiting message: longer than a publish can take after its commit (three
# tries with 5 s timeouts), and than the clocks of two web hosts differ. A document waiting in
# a backlog is never touched, however old: its message is behind the watermark. The bound on
# an acknowledged document whose message Redis lost: this + one second.
DOCUMENTS_RECONCILE_AFTER_S = env_int("DOCUMENTS_RECONCILE_AFTER_S", 30)
# Django's own request-size guard sits just above the document limit (room for the JSON or
# multipart envelope) so an oversized body is refused before it is read into memory.
DATA_UPLOAD_MAX_MEMORY_SIZE = DOCUMENTS_MAX_BYTES + 64 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = DOCUMENTS_MAX_BYTES + 64 * 1024


# --- ops: health probes, request limits, backups (apps/ops/, platform/, adr/0020) ----------
# /readyz fails when a queue's oldest message has waited longer than this: work is arriving
# faster than the workers finish it, or no worker consumes that queue. Ten minutes is far past
# a burst at the measured ~300 tasks/s and short enough for a monitor to page the same hour.
READYZ_MAX_QUEUE_AGE_S = env_int("READYZ_MAX_QUEUE_AGE_S", 600)
# Backups (database and Redis's append-only file) go here, one directory per backup; the
# newest BACKUP_KEEP are kept so the disk cannot fill (about 2x data size x BACKUP_KEEP).
BACKUP_DIR = Path(env_str("BACKUP_DIR", str(VAR_DIR / "backups")))
BACKUP_KEEP = env_int("BACKUP_KEEP", 7)
if BACKUP_KEEP < 1:  # 0 is not "keep them all": each backup would remove every other one
    raise ImproperlyConfigured(f"BACKUP_KEEP must be at least 1, got {BACKUP_KEEP}")
# PostgreSQL's client programs as the OS packages install them, one directory per major
# version (<root>/<major>/bin/pg_dump): backups use the one matching the server's version.
POSTGRES_CLIENT_ROOT = Path(env_str("POSTGRES_CLIENT_ROOT", "/usr/lib/postgresql"))
# The longest a database dump or restore may take before the backup fails.
BACKUP_DATABASE_TIMEOUT_S = env_int("BACKUP_DATABASE_TIMEOUT_S", 3600)
# Redis's data directory, where the backup copies the append-only file from.
REDIS_DATA_DIR = Path(env_str("REDIS_DATA_DIR", str(VAR_DIR / "redis")))


# --- events (the bus) and notifications (live pages) ------------------------------------
# The replay log keeps at least the newest EVENTS_LOG_MAXLEN events and drops those older
# than EVENTS_LOG_MAX_AGE_S (both trimmed per radix node, so "at least"); a client that was
# away longer, or missed more, gets a "resync" and reloads its page's state.
EVENTS_LOG_MAXLEN = env_int("EVENTS_LOG_MAXLEN", 10_000)
EVENTS_LOG_MAX_AGE_S = env_int("EVENTS_LOG_MAX_AGE_S", 3600)
# Events queued for one browser connection; a connection this far behind is cut off and
# catches up from the log when it reconnects, so a slow client never holds memory hostage.
EVENTS_CLIENT_QUEUE = env_int("EVENTS_CLIENT_QUEUE", 256)
# A comment line this often keeps idle streams open through proxies (which cut at 30-60 s).
EVENTS_HEARTBEAT_S = env_float("EVENTS_HEARTBEAT_S", 15.0)
# How long a new stream waits for its worker's subscription before it says "resync" and ends.
EVENTS_ATTACH_TIMEOUT_S = env_float("EVENTS_ATTACH_TIMEOUT_S", 5.0)
# The browser's reconnect delay after a dropped stream (the SSE "retry" field).
EVENTS_RETRY_MS = env_int("EVENTS_RETRY_MS", 1000)

# --- streams: served before Django's handler (apps/stream_front.py, adr/0018) ---------------
# path -> the endpoint that serves it. Each stream is authenticated once, from its session
# cookie, then holds no thread and no database connection while it is open.
STREAM_ENDPOINTS = {
    "/api/notifications/stream/": "apps.notifications.streams.notifications_stream",
    "/api/telemetry/stream/": "apps.telemetry.streams.telemetry_stream_endpoint",
}
# Threads per web worker that run Django's requests (apps/django_pool.py): at most this many
# at once per process; more wait for a free thread. Above DATABASE_WEB_POOL_SIZE, so a request
# waiting for a pooled connection (and its 503) never holds the others back.
WEB_REQUEST_THREADS = env_int("WEB_REQUEST_THREADS", 16)
# Threads per web worker that authenticate new streams (one or two indexed reads each): a
# reconnect storm queues here instead of starting a thread per stream.
STREAMS_AUTH_THREADS = env_int("STREAMS_AUTH_THREADS", 2)
# A stream ends after this long (or at its session's expiry, if sooner) and the browser
# reconnects, authenticating again: the bound for session changes no signal reports (a
# session row deleted by hand). Logout, deactivation and password changes end streams at once.
STREAMS_MAX_LIFE_S = env_float("STREAMS_MAX_LIFE_S", 900.0)
# The hub writes an idle stream's events straight to its socket (apps/stream_wire.py, adr/0035)
# on the uvicorn, h11 and httptools releases that path was verified on: about half the CPU per
# delivery of ASGI's send. False: every event through ASGI send (loadtests/sse_fanout.py
# measures both).
STREAMS_DIRECT_WRITES = env_bool("STREAMS_DIRECT_WRITES", True)


# --- reports: periodic jobs (intervals: scheduler/tables.py; election: scheduler/settings.py)
# Run records and roll-ups older than these are deleted by the retention purge. Runs must
# outlive any message that could still fire their slot (expires <= 6 h), or the fence forgets.
REPORTS_RUN_RETENTION_DAYS = env_int("REPORTS_RUN_RETENTION_DAYS", 30)
REPORTS_USAGE_RETENTION_DAYS = env_int("REPORTS_USAGE_RETENTION_DAYS", 400)
REPORTS_DIGEST_FROM = env_str("REPORTS_DIGEST_FROM", "reports@localhost")


# --- telemetry: the live chart's per-connection stream (adr/0010) ---------------------------
# Samples per second when the page does not ask for a rate, and the range a page may ask for
# (?rate=); outside it the stream answers 400.
TELEMETRY_RATE_HZ = env_float("TELEMETRY_RATE_HZ", 25.0)
TELEMETRY_MIN_RATE_HZ = env_float("TELEMETRY_MIN_RATE_HZ", 1.0)
TELEMETRY_MAX_RATE_HZ = env_float("TELEMETRY_MAX_RATE_HZ", 50.0)
# A stream ends after this long and the browser reconnects (to any worker): bounds how long
# one connection pins one worker, e.g. across a deploy's graceful shutdown.
TELEMETRY_STREAM_MAX_S = env_float("TELEMETRY_STREAM_MAX_S", 600.0)
TELEMETRY_RETRY_MS = env_int("TELEMETRY_RETRY_MS", 1000)
# A stream hears its session's end on the worker's event-bus subscription (control channel
# only, adr/0019). When the bus is unreachable at its start it cannot, so it ends this soon
# and authenticates again (a logout then takes effect within this bound).
TELEMETRY_UNWATCHED_MAX_S = env_float("TELEMETRY_UNWATCHED_MAX_S", 30.0)
# Telemetry streams one web worker serves at once. Each costs CPU while open: measured 0.23 %
# of a core at 25 Hz and 0.36 % at 50 Hz, the highest rate a page may ask for
# (loadtests/telemetry_cap.py, adr/0019). Half a core for telemetry is 137 streams at 50 Hz;
# 120 leaves a margin. Beyond it: 503 with Retry-After; the page retries after that long.
TELEMETRY_STREAMS_PER_WORKER = env_int("TELEMETRY_STREAMS_PER_WORKER", 120)
TELEMETRY_BUSY_RETRY_S = env_int("TELEMETRY_BUSY_RETRY_S", 5)
# Of those, one user holds at most this many (429 beyond): a few tabs of the chart, never the
# whole worker's share (issue 17).
TELEMETRY_STREAMS_PER_USER = env_int("TELEMETRY_STREAMS_PER_USER", 4)


# --- metering: per-user daily usage of the submit endpoint (adr/0011) ----------------------
# database (chosen, measured in adr/0011) | redis | local (rejected candidate, for the
# benchmark) | off (no counting, no limit: the benchmark's baseline).
METERING_BACKEND = env_str("METERING_BACKEND", "database")
if METERING_BACKEND not in ("database", "redis", "local", "off"):
    raise ImproperlyConfigured(
        f"METERING_BACKEND must be database, redis, local or off, got {METERING_BACKEND!r}")
# Document submissions accepted per user per UTC day; past it, 429 until midnight UTC.
METERING_DAILY_LIMIT = env_int("METERING_DAILY_LIMIT", 1000)
# The local candidate's flush period (unused by the others).
METERING_FLUSH_S = env_float("METERING_FLUSH_S", 2.0)


# --- monitoring: Flower (manage.py flower, apps/ops/flower_gate.py, adr/0022, adr/0036) -----
# How long after Flower last answered a viewer's request (a GET answered 2xx on a page or API
# path that needs the login) the workers keep sending task events. Flower's dashboard polls
# every second while open; its tasks page fetches on each click, so two minutes keeps events
# on while someone reads a page, and costs at most two minutes of event overhead (0.37x
# instead of 0.82x vanilla, adr/0015) after they leave.
FLOWER_VIEWER_IDLE_S = env_int("FLOWER_VIEWER_IDLE_S", 120)
if FLOWER_VIEWER_IDLE_S <= 0:
    raise ImproperlyConfigured(
        f"FLOWER_VIEWER_IDLE_S must be positive, got {FLOWER_VIEWER_IDLE_S}")

def data_addresses_check(target: RedisTarget, *, require_tls: bool) -> None:
    """Refuse addresses a host without the data role cannot use, and plain text when
    ``require_tls`` (each settings module's PLATFORM_REQUIRE_TLS; config/hosts.py)."""
    hosts.redis_check(target, roles=PLATFORM_ROLES, require_tls=require_tls)
    hosts.database_check(DATABASES["default"], roles=PLATFORM_ROLES, require_tls=require_tls)


# --- durable tasks: the one place each timing is read (defaults and reasons: policy.py) ------
# Tasks a worker's database connection serves at most before Celery's fix-up closes it anyway:
# high enough that the age (DATABASE_WORKER_CONN_MAX_AGE_S) decides, a bound all the same.
WORKER_DB_REUSE_MAX = 10_000
def celery_settings(target: RedisTarget) -> dict[str, object]:
    connection = connection_settings(target)
    return durable_task_settings(
        broker_url=connection.pop("broker_url"),
        broker_options=connection.pop("broker_transport_options"),
        broker_use_ssl=connection.pop("broker_use_ssl"),
        visibility_timeout=env_int("CELERY_VISIBILITY_TIMEOUT", policy.DEFAULT_VISIBILITY_TIMEOUT),
        heartbeat_interval=env_float("CELERY_HEARTBEAT_INTERVAL",
                                     policy.DEFAULT_HEARTBEAT_INTERVAL),
        restore_sweep_interval=env_int("CELERY_RESTORE_SWEEP_INTERVAL",
                                       policy.DEFAULT_RESTORE_SWEEP_INTERVAL),
        unacked_mutex_expire=env_int("CELERY_UNACKED_MUTEX_EXPIRE",
                                     policy.DEFAULT_UNACKED_MUTEX_EXPIRE),
        soft_time_limit=env_int("CELERY_TASK_SOFT_TIME_LIMIT", policy.DEFAULT_SOFT_TIME_LIMIT),
        time_limit=env_int("CELERY_TASK_TIME_LIMIT", policy.DEFAULT_TIME_LIMIT),
    ) | beat_settings(connection=connection) | {
        # Celery's Django fix-up closes the database connections after every task unless
        # this is set, and then only every this many tasks (celery/fixups/django.py); the age
        # and failure rule of celery_conf/database.py decides instead (adr/0043).
        "CELERY_DB_REUSE_MAX": WORKER_DB_REUSE_MAX if DATABASE_WORKER_CONN_MAX_AGE_S else None,
        # Where Redis is, for the fenced beat's and the heartbeat's own clients.
        "CELERY_PLATFORM_REDIS": target,
        # What the leading beat does every second beside the schedule (scheduler/duties.py):
        # hand documents whose worker died to another worker (adr/0030).
        "CELERY_PLATFORM_LEADER_DUTIES": ("apps.documents.recovery.documents_recover_duty",),
    }


# Django's database sessions; the lookup every logged-in request makes is SQL built once
# (apps/session_store.py: 0.04 against 0.23 ms of CPU per request).
SESSION_ENGINE = "apps.session_store"
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # the page's small script reads it for fetch() calls
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
