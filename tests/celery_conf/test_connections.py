"""One home for Redis clients: every client and Celery/RedBeat setting derived from settings.

Pure derivations here (no server), and the hub's subscriber against real sentinels: closed, it
leaves no socket open. The Sentinel clients' failovers are exercised in tests/failover/, TLS
between hosts in tests/hosts/.
"""

from __future__ import annotations

import asyncio
import gc
import secrets
import ssl
import subprocess
import sys

import psutil
import pytest
from django.core.exceptions import ImproperlyConfigured

from celery_conf.connections import (
    BEAT_CALL_TIMEOUT_S,
    SENTINEL_TIMEOUT_S,
    RedisTarget,
    async_subscriber,
    beat_client,
    broker_url,
    connection_settings,
    redis_target,
    sync_client,
)
from tests.procs import ROOT
from tests.sentinel import MASTER_NAME, SentinelGroup

SENTINEL = {"url": "", "sentinels": ["10.0.0.1:26379", "10.0.0.2:26380", "10.0.0.3:26381"],
            "master": "platform", "password": "data-pass", "sentinel_password": "sent-pass",
            "db": 0, "tls": False, "ca_file": ""}


def test_a_single_redis_url_reaches_kombu_and_redbeat_unchanged():
    target = redis_target(**{**SENTINEL, "sentinels": [], "url": "redis://:pw@h:1/0"})
    conf = connection_settings(target)
    assert conf["broker_url"] == conf["redbeat_redis_url"] == "redis://:pw@h:1/0"
    assert conf["broker_use_ssl"] is None
    assert "master_name" not in conf["broker_transport_options"]


def test_sentinel_settings_give_kombu_every_sentinel_and_both_passwords():
    conf = connection_settings(redis_target(**SENTINEL))
    assert conf["broker_url"] == ("sentinel://:data-pass@10.0.0.1:26379/0;"
                                  "sentinel://:data-pass@10.0.0.2:26380/0;"
                                  "sentinel://:data-pass@10.0.0.3:26381/0")
    options = conf["broker_transport_options"]
    assert options["master_name"] == "platform"
    assert options["sentinel_kwargs"]["password"] == "sent-pass"
    assert options["sentinel_kwargs"]["socket_timeout"] == SENTINEL_TIMEOUT_S
    assert conf["redbeat_redis_url"] == "redis-sentinel://platform"
    redbeat = conf["redbeat_redis_options"]
    assert redbeat["sentinels"] == [("10.0.0.1", 26379), ("10.0.0.2", 26380),
                                    ("10.0.0.3", 26381)]
    assert redbeat["service_name"] == "platform" and redbeat["password"] == "data-pass"


def test_tls_and_the_ca_file_reach_every_client():
    target = redis_target(**{**SENTINEL, "tls": True, "ca_file": "/etc/platform/ca.pem"})
    conf = connection_settings(target)
    assert conf["broker_use_ssl"] == {"ssl_cert_reqs": ssl.CERT_REQUIRED,
                                      "ssl_ca_certs": "/etc/platform/ca.pem"}
    assert conf["redbeat_redis_use_ssl"] == conf["broker_use_ssl"]
    assert conf["broker_transport_options"]["sentinel_kwargs"]["ssl_ca_certs"] == \
        "/etc/platform/ca.pem"
    client = sync_client(target)
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["ssl_ca_certs"] == "/etc/platform/ca.pem" and kwargs["ssl_cert_reqs"] == \
        "required"
    single = sync_client(RedisTarget(url="rediss://:pw@h:1/0", ca_file="/ca.pem"))
    assert single.connection_pool.connection_kwargs["ssl_ca_certs"] == "/ca.pem"


def test_the_beat_client_keeps_its_bounds_under_sentinel():
    client = beat_client(redis_target(**SENTINEL))
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == kwargs["socket_connect_timeout"] == BEAT_CALL_TIMEOUT_S
    assert kwargs["retry"].get_retries() == 0


def test_passwords_stay_out_of_repr():
    assert "data-pass" not in repr(redis_target(**SENTINEL))
    assert "sent-pass" not in repr(redis_target(**SENTINEL))
    assert "secret" not in repr(RedisTarget(url="redis://:secret@h:1/0"))


@pytest.mark.parametrize(("changes", "message"), [
    ({"sentinels": ["no-port"]}, "REDIS_SENTINELS must be host:port"),
    ({"sentinels": ["h:99999"]}, "REDIS_SENTINELS must be host:port"),
    ({"master": ""}, "REDIS_SENTINEL_MASTER"),
    ({"ca_file": "relative.pem"}, "REDIS_TLS_CA_FILE must be an absolute path"),
    ({"sentinels": [], "url": "http://h:1/0"}, "REDIS_URL must be redis:// or rediss://"),
    ({"db": -1}, "REDIS_DB must be between 0 and 15"),
    ({"db": 99}, "REDIS_DB must be between 0 and 15"),
    ({"sentinels": ["[::1:26379"]}, "REDIS_SENTINELS must be host:port"),
    # An IPv6 address without brackets: its last group was taken for the port
    # ("2001:db8::5" became host "2001:db8:", port 5), refused only by the first connection.
    ({"sentinels": ["2001:db8::5"]}, "REDIS_SENTINELS must be host:port"),
    ({"sentinels": ["::1:26379"]}, "REDIS_SENTINELS must be host:port"),
])
def test_bad_redis_settings_are_refused(changes, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        redis_target(**{**SENTINEL, **changes})


def test_an_ipv6_sentinel_is_written_in_brackets_and_reaches_the_client_without_them():
    target = redis_target(**{**SENTINEL, "sentinels": ["[::1]:26379", "10.0.0.2:26380"]})
    assert target.sentinels == (("::1", 26379), ("10.0.0.2", 26380))


def _production(**env: str) -> subprocess.CompletedProcess[str]:
    base = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "config.settings.production",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(48), "DJANGO_ALLOWED_HOSTS": "box",
            "DATABASE_URL": "sqlite:////tmp/unused.sqlite3"}
    script = ("import django; django.setup(); from celery_conf import app; "
              "print(app.conf.broker_url)")
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=60)


def test_production_sentinel_needs_both_passwords():
    sentinels = {"REDIS_SENTINELS": "10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379"}
    missing = _production(**sentinels, REDIS_PASSWORD=secrets.token_urlsafe(24))
    assert missing.returncode != 0 and "REDIS_SENTINEL_PASSWORD is not set" in missing.stderr
    weak = _production(**sentinels, REDIS_PASSWORD="short",
                       REDIS_SENTINEL_PASSWORD=secrets.token_urlsafe(24))
    assert weak.returncode != 0 and "REDIS_PASSWORD must be a Redis password" in weak.stderr
    ok = _production(**sentinels, REDIS_PASSWORD=secrets.token_urlsafe(24),
                     REDIS_SENTINEL_PASSWORD=secrets.token_urlsafe(24))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.count("sentinel://") == 3


def test_a_ca_file_that_is_not_there_stops_start_up(tmp_path):
    sentinels = {"REDIS_SENTINELS": "10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379",
                 "REDIS_PASSWORD": secrets.token_urlsafe(24),
                 "REDIS_SENTINEL_PASSWORD": secrets.token_urlsafe(24), "REDIS_TLS": "true"}
    missing = _production(**sentinels, REDIS_TLS_CA_FILE=str(tmp_path / "ca.pem"))
    assert missing.returncode != 0 and "is not a readable file" in missing.stderr
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    present = _production(**sentinels, REDIS_TLS_CA_FILE=str(tmp_path / "ca.pem"))
    assert present.returncode == 0, present.stderr


@pytest.mark.processes
@pytest.mark.past_one_box
def test_the_hubs_subscriber_leaves_no_socket_per_reconnect(tmp_path, measure):
    """The hub opens a new subscriber at every reconnect; closed, each leaves nothing open,
    to the primary or to any sentinel. A redis-py client closed without its ``Sentinel``
    leaves one socket open per sentinel it asked for as long as the ``Sentinel`` lives: the
    control round shows that the count can fail."""
    from redis.asyncio.sentinel import Sentinel as AsyncSentinel

    group = SentinelGroup(tmp_path).start()
    try:
        target = redis_target(
            url="", sentinels=[f"127.0.0.1:{s.port}" for s in group.sentinels],
            master=MASTER_NAME, password=group.password,
            sentinel_password=group.sentinel_password, db=0, tls=False, ca_file="")
        ports = {s.port for s in group.sentinels} | {n.port for n in group.nodes}

        def open_sockets() -> int:
            gc.collect()  # the harness's own finished clients close theirs when collected
            return sum(1 for c in psutil.Process().net_connections(kind="tcp")
                       if c.raddr and c.raddr.port in ports and c.status == "ESTABLISHED")

        async def reconnects(rounds: int) -> list[int]:
            counts, kept = [], []  # kept: only closing, not collection, may free a socket
            for _ in range(rounds):
                async with async_subscriber(target) as client:
                    assert await client.ping()
                    assert open_sockets() >= 2  # the primary and a sentinel, while open
                kept.append(client)
                counts.append(open_sockets())
            return counts

        async def closed_without_the_sentinel(rounds: int) -> int:
            kept = []  # as a pool keeps its Sentinel: the garbage collector would close them
            for _ in range(rounds):
                sentinel = AsyncSentinel(list(target.sentinels),
                                         sentinel_kwargs={"password": group.sentinel_password},
                                         password=group.password)
                client = sentinel.master_for(MASTER_NAME)
                assert await client.ping()
                await client.aclose()
                kept.append(sentinel)
            return open_sockets()

        before = open_sockets()
        counts = asyncio.run(reconnects(10))
        assert counts == [before] * 10, counts
        leaked = asyncio.run(closed_without_the_sentinel(3)) - before
        assert leaked >= 3, leaked
        measure(reconnects=10, sockets_left=counts[-1] - before,
                control_left_after_3=leaked)
    finally:
        group.stop()


def test_ipv6_sentinels_are_bracketed_in_kombus_urls():
    target = redis_target(**{**SENTINEL, "sentinels": ["[::1]:26379", "10.0.0.2:26380"]})
    assert broker_url(target) == ("sentinel://:data-pass@[::1]:26379/0;"
                                  "sentinel://:data-pass@10.0.0.2:26380/0")


def test_ipv6_addresses_are_described_in_brackets():
    # `manage.py status` printed "sentinel platform@::1:26379" and "redis://::1:6390/0".
    target = redis_target(**{**SENTINEL, "sentinels": ["[::1]:26379", "10.0.0.2:26380"]})
    assert target.describe() == "sentinel platform@[::1]:26379,10.0.0.2:26380/0"
    single = redis_target(**{**SENTINEL, "sentinels": [], "url": "redis://:pw@[::1]:6390/0"})
    assert single.describe() == "redis://[::1]:6390/0"
