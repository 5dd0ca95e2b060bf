"""Which part of the platform a host runs, and the checks that keep a host's addresses honest.

A host runs some of the roles (``PLATFORM_ROLES``): ``web``, ``workers``, ``beat``, ``flower``,
``data`` (Redis and PostgreSQL) and ``sentinel`` (a Redis Sentinel on a host without ``data``).
A host without ``data`` reaches them by address; these checks refuse, at start-up, the
addresses that can only be a mistake on such a host (adr/0026).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

ROLES = ("web", "workers", "beat", "flower", "data", "sentinel")
# One box runs everything but a sentinel: a lone sentinel could never reach the quorum of two.
# The third sentinel of a Sentinel group is asked for by name on one app host (adr/0025).
DEFAULT_ROLES = ("web", "workers", "beat", "flower", "data")
# Host names that always mean "this machine", whatever the resolver says.
DEFAULT_LOOPBACK = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))
# libpq's modes that check the server's certificate; require/prefer encrypt but would talk to
# anyone who answers on the address.
VERIFYING_SSLMODES = frozenset({"verify-full", "verify-ca"})
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def roles_parse(raw: str) -> frozenset[str]:
    """``"web,workers"`` -> the roles; an empty list or an unknown name is refused."""
    roles = [item.strip() for item in raw.split(",") if item.strip()]
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        raise ImproperlyConfigured(
            f"PLATFORM_ROLES names unknown role(s) {', '.join(unknown)}; "
            f"choose from {', '.join(ROLES)}")
    if not roles:
        raise ImproperlyConfigured(f"PLATFORM_ROLES is empty; choose from {', '.join(ROLES)}")
    return frozenset(roles)


def is_loopback(host: str | None) -> bool:
    """Does ``host`` name this machine by its usual name: empty (a Unix socket, a default),
    localhost, 127.0.0.1, ::1 or the any-address? Other 127/8 addresses are not refused: an
    operator never types them by accident, and they are how tests run several hosts on one
    machine (tests/hosts/)."""
    if not host or host.startswith("/"):
        # Empty, or a directory (libpq's Unix socket, e.g. postgres://u:p@%2Fvar%2Frun%2F
        # postgresql/db): this machine's own server either way.
        return True
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return address in DEFAULT_LOOPBACK or address.is_unspecified


def redis_check(target: Any, *, roles: Iterable[str], require_tls: bool) -> None:
    """Refuse a Redis (``settings.REDIS``: a URL or sentinels) this host cannot share, or
    reaches in plain text when TLS is required. The client settings verify the certificate
    whenever TLS is on (celery_conf/connections.py)."""
    if require_tls and not target.uses_tls:
        raise ImproperlyConfigured(
            "PLATFORM_REQUIRE_TLS is on but Redis is reached without TLS: use rediss:// "
            "(or REDIS_TLS=true with sentinels) and REDIS_TLS_CA_FILE; set "
            "PLATFORM_REQUIRE_TLS=false only if the network between hosts is trusted")
    if target.sentinel:
        for host, _port in target.sentinels:
            _remote_check("REDIS_SENTINELS", host, roles=roles)
    else:
        _remote_check("REDIS_URL", urlsplit(target.url).hostname, roles=roles)


def database_check(database: dict[str, Any], *, roles: Iterable[str], require_tls: bool) -> None:
    """Refuse a database this host cannot share with the others, or reaches without TLS."""
    engine = database.get("ENGINE", "")
    if engine.endswith("sqlite3"):
        if "data" not in roles:
            raise ImproperlyConfigured(
                "this host has no 'data' role (PLATFORM_ROLES), so its database is on another "
                "host: set DATABASE_URL to that host's PostgreSQL (a SQLite file cannot be "
                "shared between hosts)")
        return
    if require_tls and database.get("OPTIONS", {}).get("sslmode") not in VERIFYING_SSLMODES:
        raise ImproperlyConfigured(
            "PLATFORM_REQUIRE_TLS is on but DATABASE_URL lacks "
            "?sslmode=verify-full&sslrootcert=/path/to/ca.pem (or sslmode=verify-ca); set "
            "PLATFORM_REQUIRE_TLS=false only if the network between hosts is trusted")
    _remote_check("DATABASE_URL", database.get("HOST"), roles=roles)


def _remote_check(name: str, host: str | None, *, roles: Iterable[str]) -> None:
    if "data" not in roles and is_loopback(host):
        raise ImproperlyConfigured(
            f"this host has no 'data' role (PLATFORM_ROLES), so {name} must name the data "
            f"host's address, not {host or 'a local socket'}: every host would otherwise use "
            "its own, empty, Redis or database")
