"""Property-based fuzzing of every input a browser or script can send, against a live server.

Hypothesis generates JSON bodies (nested arbitrarily deep among them), form posts and uploads
(any file name, any bytes), and stream parameters (any Last-Event-ID, ?after=, ?rate=). Each
answer must not be a 500, and a refused request (any 4xx) must change nothing: the documents
table and the usage counters are read before and after. The suite runs a few hundred cases;
``loadtests/fuzz_endpoints.py`` runs thousands with the same checks.
"""

from __future__ import annotations

import http.client
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from hypothesis import strategies as st

from tests.procs import Client, Stack

# All of Unicode: control characters, and lone surrogates (Hypothesis leaves them out unless
# told: category Cs), which JSON carries as "\\ud800" and a URL or form as raw bytes.
ANY_CHAR = st.characters(exclude_categories=())
ANY_TEXT = st.text(ANY_CHAR, max_size=300)
JSON_LEAF = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | ANY_TEXT
JSON_VALUE = st.recursive(JSON_LEAF, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


@st.composite
def json_bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    """(content type, body): valid documents, wrong shapes, deep nesting, broken bytes."""
    kind = draw(st.sampled_from(["object", "any", "nested", "bytes"]))
    if kind == "object":
        body = json.dumps(draw(st.fixed_dictionaries(
            {}, optional={"title": JSON_VALUE | ANY_TEXT,
                          "text": JSON_VALUE | ANY_TEXT}))).encode()
    elif kind == "any":
        body = json.dumps(draw(JSON_VALUE)).encode()
    elif kind == "nested":
        depth = draw(st.integers(min_value=100, max_value=200_000))
        opener = draw(st.sampled_from(["[", '{"a":']))
        body = (opener * depth).encode()
    else:
        body = draw(st.binary(max_size=200))
    ctype = draw(st.sampled_from(["application/json", "application/json; charset=utf-8",
                                  "text/plain", "application/x-www-form-urlencoded"]))
    return ctype, body


@st.composite
def uploads(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.text(ANY_CHAR, max_size=40)
                | st.sampled_from(["a.txt", "b.md", "../../etc/x.txt", "x.exe", "", ".txt"]))
    content = draw(st.binary(max_size=300) | ANY_TEXT.map(wire_bytes))
    return {"title": draw(st.text(ANY_CHAR, max_size=250)),
            "text": draw(st.text(ANY_CHAR, max_size=50)),
            "name": name, "content": content, "with_file": draw(st.booleans())}


def wire_bytes(text: str) -> bytes:
    """Text as a client would send it, a lone surrogate as its raw (invalid UTF-8) bytes."""
    return text.encode("utf-8", "surrogatepass")


HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF,
                                    blacklist_characters="\x7f"), max_size=80)
CURSORS = (HEADER_TEXT | st.text(ANY_CHAR, max_size=40)
           | st.from_regex(r"[0-9]{1,40}-[0-9]{1,40}", fullmatch=True)
           | st.just("²-0") | st.just("1" * 5000 + "-0"))


# The first frames a stream answers with: live after replay, a gap, or telemetry's greeting.
ANSWERS = (b"event: ready", b"event: resync", b"event: hello")


@dataclass
class Tally:
    statuses: Counter[int] = field(default_factory=Counter)
    cases: int = 0
    server_errors: list[str] = field(default_factory=list)
    changed_by_refusal: list[str] = field(default_factory=list)


def state(stack: Stack) -> tuple[int, int]:
    """What a request could change: documents stored and submissions counted."""
    docs = stack.query("SELECT COUNT(*) AS n FROM documents_document")[0]["n"]
    used = stack.query("SELECT COALESCE(SUM(count), 0) AS n FROM metering_usagecounter")[0]["n"]
    return int(docs), int(used)


def check(stack: Stack, tally: Tally, what: str, status: int, before: tuple[int, int]) -> None:
    tally.cases += 1
    tally.statuses[status] += 1
    if status >= 500 and status != 503:
        tally.server_errors.append(f"{status} for {what[:300]}")
    if status >= 400:
        after = state(stack)
        if after != before:
            tally.changed_by_refusal.append(f"{before}->{after} by {status} {what[:300]}")


def post_json(stack: Stack, client: Client, tally: Tally, ctype: str, body: bytes) -> None:
    before = state(stack)
    response = client.http.post(client.base + "/api/documents/", data=body,
                                headers={**client.headers(), "Content-Type": ctype}, timeout=30)
    check(stack, tally, f"json {ctype} {body[:200]!r}", response.status_code, before)


def post_upload(stack: Stack, client: Client, tally: Tally, form: dict[str, Any]) -> None:
    before = state(stack)
    name = form["name"].encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    files = {"file": (name, form["content"])} if form["with_file"] else None
    response = client.http.post(client.base + "/documents/",
                                data={"title": wire_bytes(form["title"]),
                                      "text": wire_bytes(form["text"]),
                                      "csrfmiddlewaretoken": client.http.cookies["csrftoken"]},
                                files=files, headers={"Referer": client.base + "/"},
                                timeout=30, allow_redirects=False)
    check(stack, tally, f"upload {form!r}", response.status_code, before)


def open_stream(stack: Stack, client: Client, tally: Tally, path: str,
                headers: dict[str, str]) -> bytes:
    """One stream request; returns its first frames (up to a ready/resync/hello/error)."""
    parts = urlsplit(client.base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    cookie = "; ".join(f"{k}={v}" for k, v in client.http.cookies.items())
    before = state(stack)
    try:
        conn.putrequest("GET", path)
        conn.putheader("Cookie", cookie)
        for name, value in headers.items():
            conn.putheader(name, value.encode("latin-1"))
        conn.endheaders()
        response = conn.getresponse()
        head, answered = b"", False
        if response.status == 200:
            while not answered:  # a replay may come first: read up to the stream's answer
                line = response.fp.readline()
                if not line:
                    break
                head += line
                answered = line.rstrip() in ANSWERS
        else:
            head = response.read()
        check(stack, tally, f"GET {path} {headers!r}", response.status, before)
        if response.status == 200 and not answered:
            tally.server_errors.append(f"stream ended with no answer: {path} {headers!r}")
        return head
    finally:
        conn.close()


STREAMS = ("/api/notifications/stream/", "/api/telemetry/stream/")


def stream_case(stack: Stack, client: Client, tally: Tally, target: str, value: str) -> None:
    if target == "last-event-id":
        header = value.encode("utf-8", "surrogatepass").decode("latin-1")
        header = "".join(c for c in header if c not in "\r\n\0")
        open_stream(stack, client, tally, STREAMS[0], {"Last-Event-ID": header})
    elif target == "after":
        open_stream(stack, client, tally,
                    STREAMS[0] + "?after=" + quote(wire_bytes(value), safe=""), {})
    elif target == "many":
        # Beyond DATA_UPLOAD_MAX_NUMBER_FIELDS (1,000) and below it, on either stream.
        count = 1 + sum(map(ord, value)) % 2000
        path = STREAMS[len(value) % 2] + "?" + "&".join(f"p{i}=1" for i in range(count))
        open_stream(stack, client, tally, path, {})
    else:
        open_stream(stack, client, tally,
                    STREAMS[1] + "?rate=" + quote(wire_bytes(value), safe=""), {})


STREAM_TARGETS = ("last-event-id", "after", "rate", "many")
