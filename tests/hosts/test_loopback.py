"""The addresses an app host refuses, checked without starting anything (config/hosts.py)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from config import hosts

APP = frozenset({"web", "workers"})


@pytest.mark.parametrize("host", ["", "localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0",
                                  "/var/run/postgresql", "/tmp"])
def test_this_machines_own_server_is_refused_on_an_app_host(host):
    database = {"ENGINE": "django.db.backends.postgresql", "HOST": host}
    with pytest.raises(ImproperlyConfigured, match="must name the data host's address"):
        hosts.database_check(database, roles=APP, require_tls=False)


@pytest.mark.parametrize("host", ["10.0.0.2", "db.example.com", "127.0.0.2"])
def test_another_hosts_address_is_accepted(host):
    database = {"ENGINE": "django.db.backends.postgresql", "HOST": host}
    hosts.database_check(database, roles=APP, require_tls=False)
