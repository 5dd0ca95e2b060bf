"""A logged-in submitting client that costs the box as little as a Python client can.

The benchmarks' clients share the two cores with the platform they measure, so what a client
costs per request is taken from the platform's capacity. ``tests.procs.Client`` (requests)
cost 1.2 ms of CPU per document in ``ceiling.py``, 14 % of the box at its ceiling: cookie
jars, header dictionaries and adapters rebuilt for every request. This one logs in with that
client once, then sends each submit on one kept-alive ``http.client`` connection with the
session and CSRF headers built once (``ceiling.py`` measures both: its ``harness_cpu_ms``).
"""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

from tests.procs import Client

DOCUMENTS_API = "/api/documents/"


class LeanClient:
    def __init__(self, client: Client) -> None:
        parts = urlsplit(client.base)
        assert parts.scheme == "http" and parts.hostname and parts.port, client.base
        self.host, self.port = parts.hostname, parts.port
        cookies = client.http.cookies
        self.headers = {
            "Host": parts.netloc,
            "Cookie": f"sessionid={cookies['sessionid']}; csrftoken={cookies['csrftoken']}",
            "X-CSRFToken": cookies["csrftoken"],
            "Referer": client.base + "/",
            "Content-Type": "application/json",
        }
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)

    @classmethod
    def login(cls, base: str, username: str, password: str) -> LeanClient:
        return cls(Client.login(base, username, password))

    def submit(self, text: str, title: str = "") -> int:
        body = json.dumps({"title": title, "text": text}).encode()
        try:
            self.conn.request("POST", DOCUMENTS_API, body, self.headers)
            response = self.conn.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            # The server closed the kept connection while it was idle (uvicorn's keep-alive
            # timeout, 5 s, passes between a benchmark's phases): it never read this request,
            # so it is sent once more on a new connection.
            self.conn.close()
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            self.conn.request("POST", DOCUMENTS_API, body, self.headers)
            response = self.conn.getresponse()
        data = response.read()
        if response.status != 202:
            raise AssertionError(f"submit answered {response.status}: {data[:300]!r}")
        return int(json.loads(data)["id"])

    def close(self) -> None:
        self.conn.close()
