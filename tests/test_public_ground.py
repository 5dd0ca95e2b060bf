"""Every guarantee on public ground (adr/0030): no module but the one allowed names a private
or undocumented part of a third-party package, and the checker itself sees the uses it must.
"""

from __future__ import annotations

from pathlib import Path

from tests.public_ground import ALLOWED, scan


def test_no_module_but_the_allowed_one_reaches_into_a_library():
    outside = [str(f) for f in scan() if f.path not in ALLOWED]
    assert outside == [], "\n".join(outside)


def test_the_checker_finds_each_kind_of_private_use(tmp_path: Path):
    package = tmp_path / "apps"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "bad.py").write_text(
        "from django.http.request import split_domain_port\n"
        "from kombu.transport import redis as kombu_redis\n"
        "from flower.views import BaseHandler\n"
        "from celery.worker.request import Request\n"
        "\n"
        "def renew(qos):\n"
        "    return list(qos._delivered), getattr(qos, '_dirty')\n"
        "\n"
        "BaseHandler.get_current_user = renew\n"
        "\n"
        "class Fenced(kombu_redis.Channel):\n"
        "    def _put(self, queue, message, **kwargs):\n"
        "        return self._q_for_pri(queue, 0)\n"
        "\n"
        "class Mine(Request):\n"
        "    def own(self):\n"
        "        self._mine = 1\n"
        "        return self._mine\n")
    found = {(f.line, f.what.split(" (")[0].split(",")[0]) for f in scan(tmp_path)}
    assert found == {
        (1, "imports split_domain_port"),
        (7, "uses the private attribute _delivered"),
        (7, "getattr of the private attribute _dirty"),
        (9, "patches flower.views.BaseHandler.get_current_user"),
        (12, "overrides the private method _put of a third-party base"),
        (13, "uses the private attribute _q_for_pri of a third-party base"),
    }, found
