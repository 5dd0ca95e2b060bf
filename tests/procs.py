"""Real processes for tests and load tests: redis-server, celery worker and beat, uvicorn.

A ``Stack`` is one isolated platform: its own Redis (platform/redis.conf, a free loopback
port, a password, its own data directory), its own SQLite file, and the environment its child
processes share. Every wait has a deadline and polls a condition; nothing sleeps blindly.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis
import requests

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
QUEUES = "default,documents,reports"
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(
    predicate: Callable[[], T], *, timeout: float, what: str, interval: float = 0.1
) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # a server still starting refuses connections
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise TimeoutError(f"{what}: not within {timeout} s{detail}")
        time.sleep(interval)


@dataclass
class Proc:
    """A child process in its own session, so a signal can reach it alone or with its group."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int, *, group: bool = False) -> None:
        if not self.alive():
            return
        if group:
            os.killpg(self.popen.pid, sig)
        else:
            self.popen.send_signal(sig)

    def wait_exit(self, timeout: float) -> int:
        return self.popen.wait(timeout=timeout)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM the group, then SIGKILL whatever is left after ``timeout``."""
        if self.alive():
            try:
                self.signal(signal.SIGTERM, group=True)
                self.popen.wait(timeout=timeout)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                pass
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)  # children orphaned by a killed parent
        except ProcessLookupError:
            pass
        if self.popen.poll() is None:
            self.popen.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def spawn(name: str, argv: list[str], *, env: dict[str, str], log_dir: Path,
          netns: str | None = None) -> Proc:
    """``argv`` in its own session; inside network namespace ``netns`` when given (a host
    of tests/netns.py: ``ip netns exec`` execs the command, so the pid is the command's)."""
    if netns is not None:
        argv = ["ip", "netns", "exec", netns, *argv]
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
    return Proc(name=name, popen=popen, log_path=log_path)


# Which Redis every Stack runs on: "single" (one redis-server, as shipped) or "sentinel" (a
# primary, a replica and three sentinels, tests/sentinel.py). Read when a RedisServer is made.
REDIS_TOPOLOGIES = ("single", "sentinel")


def redis_topology(topology: str | None = None) -> str:
    chosen = topology or os.environ.get("TEST_REDIS", "single")
    if chosen not in REDIS_TOPOLOGIES:
        raise ValueError(f"TEST_REDIS must be single or sentinel, got {chosen!r}")
    return chosen


class RedisURL(str):
    """A Redis URL, plus the environment a platform process needs beyond REDIS_URL (the
    Sentinel group's addresses and passwords); ``child_env`` adds it."""

    env: dict[str, str]

    def __new__(cls, url: str, *, env: dict[str, str]) -> RedisURL:
        value = super().__new__(cls, url)
        value.env = env
        return value


class RedisServer:
    """redis-server with the platform's config, on a free port, restartable from its files.

    Under TEST_REDIS=sentinel (or ``topology="sentinel"``) it is a ``tests.sentinel.
    SentinelRedis`` instead: the same methods, on a Sentinel group's current primary.
    """

    def __new__(cls, base_dir: Path, *, overrides: dict[str, str] | None = None,
                topology: str | None = None, name: str = "redis") -> RedisServer:
        if cls is RedisServer and redis_topology(topology) == "sentinel":
            from tests.sentinel import SentinelRedis

            return super().__new__(SentinelRedis)
        return super().__new__(cls)

    def __init__(self, base_dir: Path, *, overrides: dict[str, str] | None = None,
                 topology: str | None = None, name: str = "redis") -> None:
        self.name = name
        self.dir = base_dir / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = base_dir / "log"
        self.port = free_port()
        self.password = secrets.token_urlsafe(16)
        self.overrides = overrides or {}
        self.proc: Proc | None = None
        self.starts = 0
        self.netns: str | None = None  # the network namespace it runs in (tests/netns.py)

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis.from_url(self.url, decode_responses=True, socket_timeout=5, **kwargs)

    def start(self) -> RedisServer:
        conf = self.dir / "redis.conf"
        lines = [
            f"include {ROOT / 'platform' / 'redis.conf'}",
            f"port {self.port}",
            f"dir {self.dir}",
            f"requirepass {self.password}",
        ] + [f"{k} {v}" for k, v in self.overrides.items()]
        conf.write_text("\n".join(lines) + "\n")
        self.starts += 1
        self.proc = spawn(f"{self.name}-{self.starts}", ["redis-server", str(conf)],
                          env=dict(os.environ), log_dir=self.log_dir, netns=self.netns)
        client = self.client()
        wait_until(lambda: client.ping() and client.info("persistence")["loading"] == 0,
                   timeout=30, what="redis-server answers PING")
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.proc is not None
        self.proc.signal(sig)
        self.proc.wait_exit(timeout=30)

    def restart(self) -> RedisServer:
        """Start again on the same port and directory: it loads the append-only file."""
        if self.proc is not None and self.proc.alive():
            self.kill(signal.SIGTERM)
        return self.start()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


@dataclass
class Stack:
    """One platform for one test: Redis, a database file, and the processes a test starts."""

    base_dir: Path
    template_db: Path
    env_overrides: dict[str, str] = field(default_factory=dict)
    redis_overrides: dict[str, str] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    # A tests.pgserver.PostgresTemplate: this Stack then runs on a fresh PostgreSQL database
    # copied from it instead of a copy of ``template_db``.
    postgres: Any = None

    def __post_init__(self) -> None:
        self.log_dir = self.base_dir / "log"
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.db_path = self.base_dir / "db.sqlite3"
        self.db_name = ""
        database_url = None
        if self.postgres is not None:
            self.db_name, database_url = self.postgres.new_database()
        else:
            shutil.copyfile(self.template_db, self.db_path)
        self.redis = RedisServer(self.base_dir, overrides=self.redis_overrides).start()
        self.env = child_env(
            self.base_dir, database=self.db_path, redis_url=self.redis.url,
            database_url=database_url, **self.env_overrides
        )

    @property
    def engine(self) -> str:
        return "postgres" if self.postgres is not None else "sqlite"

    # --- processes ---------------------------------------------------------------------
    def start_worker(self, name: str, *, concurrency: int = 1, wait: bool = True,
                     **env: str) -> Proc:
        proc = spawn(name, [
            str(BIN / "celery"), "-A", "celery_conf", "worker", "-n", f"{name}@%h",
            "-Q", QUEUES, "-c", str(concurrency), "--loglevel", "INFO",
        ], env={**self.env, **env}, log_dir=self.log_dir)
        self.procs.append(proc)
        if wait:
            self.wait_worker_ready(name, proc)
        return proc

    def wait_worker_ready(self, name: str, proc: Proc, timeout: float = 60) -> None:
        client = self.redis.client()
        host = socket.gethostname()

        def ready() -> bool:
            if not proc.alive():
                raise AssertionError(f"{name} exited:\n{proc.log()[-3000:]}")
            return bool(client.exists(f"platform:worker:{name}@{host}")) and " ready." in proc.log()

        wait_until(ready, timeout=timeout, what=f"worker {name} ready")

    def start_beat(self, name: str, **env: str) -> Proc:
        proc = spawn(name, [
            str(BIN / "celery"), "-A", "celery_conf", "beat",
            "-S", "redbeat.RedBeatScheduler", "--loglevel", "INFO",
        ], env={**self.env, **env}, log_dir=self.log_dir)
        self.procs.append(proc)
        return proc

    def start_elected_beat(self, name: str, **env: str) -> Proc:
        """A beat as platform/supervisord.conf runs it: the fenced, lock-elected scheduler."""
        proc = spawn(name, [
            str(BIN / "celery"), "-A", "celery_conf", "beat",
            "-S", "scheduler.redbeat:FencedRedBeatScheduler", "--loglevel", "INFO",
        ], env={**self.env, "BEAT_NAME": name, **env}, log_dir=self.log_dir)
        self.procs.append(proc)
        return proc

    def start_web(self, *, workers: int = 2, wait: bool = True,
                  uvicorn_args: tuple[str, ...] = (), **env: str) -> Web:
        port = free_port()
        proc = spawn(f"web-{port}", [
            str(BIN / "uvicorn"), "config.asgi:application", "--host", "127.0.0.1",
            "--port", str(port), "--workers", str(workers), "--no-access-log", *uvicorn_args,
        ], env={**self.env, **env}, log_dir=self.log_dir)
        self.procs.append(proc)
        web = Web(proc=proc, base=f"http://127.0.0.1:{port}")
        if wait:
            # Every worker process up, not just the first: until the last one has loaded the
            # app, the kernel hands every connection to the ones that have.
            wait_until(lambda: proc.log().count("Application startup complete.") >= workers,
                       timeout=60, what=f"{workers} web worker(s) started")
            wait_until(lambda: requests.get(web.base + "/accounts/login/", timeout=2).ok,
                       timeout=60, what="web server answers")
        return web

    def manage(self, *args: str, check: bool = True,
               **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env={**self.env, **env},
            capture_output=True, text=True, check=check, timeout=120,
        )

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.redis.stop()
        if self.postgres is not None and self.postgres.server.proc.alive():
            self.postgres.server.drop_database(self.db_name)

    def logs(self) -> str:
        parts = []
        for path in sorted(self.log_dir.glob("*.log")):
            parts.append(f"----- {path.name} -----\n{path.read_text(errors='replace')[-4000:]}")
        return "\n".join(parts)

    # --- database ----------------------------------------------------------------------
    @contextmanager
    def db(self) -> Iterator[Any]:
        """A connection to this Stack's database, either engine: ``?`` placeholders, rows by
        name and by position (sqlite3.Row, or tests.pgserver.Row)."""
        if self.postgres is not None:
            with self.postgres.server.db(self.db_name) as pg:
                yield pg
            return
        conn = sqlite3.connect(self.db_path, timeout=20)
        conn.row_factory = sqlite3.Row
        try:
            yield conn
        finally:
            conn.close()

    def query(self, sql: str, *params: Any) -> list[Any]:
        with self.db() as conn:
            return conn.execute(sql, params).fetchall()


@dataclass
class Web:
    proc: Proc
    base: str

    def session(self, username: str = "tester", password: str = "tester-password-1") -> Client:
        return Client.login(self.base, username, password)


class Client:
    """A logged-in browser-like session: cookies, CSRF header, JSON."""

    def __init__(self, base: str, session: requests.Session) -> None:
        self.base = base
        self.http = session

    @classmethod
    def login(cls, base: str, username: str, password: str) -> Client:
        http = requests.Session()
        http.get(base + "/accounts/login/", timeout=10)
        response = http.post(base + "/accounts/login/", data={
            "username": username, "password": password,
            "csrfmiddlewaretoken": http.cookies["csrftoken"],
        }, headers={"Referer": base + "/accounts/login/"}, timeout=10, allow_redirects=False)
        assert response.status_code == 302, f"login failed: {response.status_code}"
        return cls(base, http)

    def headers(self) -> dict[str, str]:
        return {"X-CSRFToken": self.http.cookies["csrftoken"], "Referer": self.base + "/"}

    def post(self, path: str, **kwargs: Any) -> requests.Response:
        return self.http.post(self.base + path, headers=self.headers(), timeout=30, **kwargs)

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.http.get(self.base + path, timeout=30, **kwargs)

    def submit(self, text: str, title: str = "") -> int:
        response = self.post("/api/documents/", json={"title": title, "text": text})
        assert response.status_code == 202, response.text
        return int(response.json()["id"])


def child_env(base_dir: Path, *, database: Path, redis_url: str,
              database_url: str | None = None, **overrides: str) -> dict[str, str]:
    """The environment of a platform process; ``database_url`` (any engine) wins over
    ``database`` (a SQLite file)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    env.update({
        "DJANGO_SETTINGS_MODULE": "config.settings.development",
        "DJANGO_SECRET_KEY": "tests-only",
        "DJANGO_DEBUG": "false",
        "DATABASE_URL": database_url or f"sqlite:///{database}",
        "REDIS_URL": redis_url,
        "PLATFORM_VAR_DIR": str(base_dir),
        "EMAIL_FILE_PATH": str(base_dir / "mail"),
        "PYTHONUNBUFFERED": "1",
        "PATH": f"{BIN}:{env.get('PATH', '')}",
    })
    env.update(getattr(redis_url, "env", {}))  # a Sentinel group's addresses (RedisURL)
    env.update(overrides)
    return env


def make_template_db(base_dir: Path) -> Path:
    """Migrate once and create the test login; each Stack copies the file."""
    base_dir.mkdir(parents=True, exist_ok=True)
    db = base_dir / "template.sqlite3"
    migrate_and_create_login(base_dir, database_url=f"sqlite:///{db}")
    with sqlite3.connect(db) as conn:  # fold the WAL into the file before it is copied
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db


def migrate_and_create_login(base_dir: Path, *, database_url: str) -> None:
    """Migrate the database at ``database_url`` and create the test login (any engine)."""
    env = child_env(base_dir, database=base_dir / "unused.sqlite3",
                    redis_url="redis://:unused@127.0.0.1:1/0", database_url=database_url,
                    DJANGO_SUPERUSER_PASSWORD="tester-password-1")
    for args in (["migrate", "--noinput", "-v", "0"],
                 ["createsuperuser", "--noinput", "--username", "tester",
                  "--email", "tester@example.com"]):
        result = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {args[0]} failed:\n{result.stderr[-3000:]}")
