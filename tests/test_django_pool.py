"""Django's WSGI handler behind the web's fixed thread pool (apps/django_pool.py): the request
Django sees is the one the client sent, streaming answers stream, and each response is closed
in the thread that made it. Whole requests through real uvicorn are every other web test."""

from __future__ import annotations

import asyncio
import io
import threading
from typing import Any

import pytest
from django.core.handlers.wsgi import WSGIRequest
from django.core.signals import request_finished
from django.http import FileResponse, HttpResponse, StreamingHttpResponse

from apps.django_pool import ThreadedDjango, wsgi_environ


def scope_of(path: str, *, headers: list[tuple[bytes, bytes]] = (), **extra: Any) -> dict:  # type: ignore[assignment]
    return {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(),
            "root_path": "", "query_string": b"q=%C3%A9&x=1", "http_version": "1.1",
            "scheme": "https", "server": ("10.0.0.5", 443), "client": ("10.0.0.9", 51234),
            "headers": list(headers), **extra}


def test_the_request_django_sees_is_the_one_sent(settings):
    settings.ALLOWED_HOSTS = ["box.example"]
    body = io.BytesIO(b'{"text": "\xc3\xa9t\xc3\xa9"}')  # chunked: no Content-Length header
    environ = wsgi_environ(scope_of("/documents/été/ünï", headers=[
        (b"host", b"box.example"), (b"content-type", b"application/json"),
        (b"x-forwarded-for", b"1.1.1.1"), (b"x_forwarded_for", b"6.6.6.6"),
        (b"accept", b"text/html"), (b"accept", b"application/json"),
        (b"cookie", b"sessionid=abc; csrftoken=def"),
    ]), body)
    request = WSGIRequest(environ)
    assert request.path == "/documents/été/ünï"
    assert request.is_secure() and request.get_host() == "box.example"
    assert request.GET["q"] == "é"
    assert request.META["REMOTE_ADDR"] == "10.0.0.9"
    assert request.META["HTTP_X_FORWARDED_FOR"] == "1.1.1.1"  # the "_" spelling is dropped
    assert request.META["HTTP_ACCEPT"] == "text/html,application/json"
    assert request.COOKIES == {"sessionid": "abc", "csrftoken": "def"}
    assert request.content_type == "application/json"
    assert request.body == body.getvalue()  # read though no Content-Length came


def run(app: ThreadedDjango, scope: dict, body: bytes | None) -> list[dict]:
    sent: list[dict] = []

    async def receive() -> dict:
        if body is None:
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


def test_a_streaming_answer_goes_out_chunk_by_chunk_and_closes_in_its_thread():
    threads: dict[str, int] = {}

    def wsgi(environ: dict, start_response: Any) -> StreamingHttpResponse:
        threads["called"] = threading.get_ident()
        response = StreamingHttpResponse(iter([b"one", b"", b"two"]), content_type="text/plain")
        response.set_cookie("k", "v")
        start_response("200 OK", [(k, v) for k, v in response.items()]
                       + [("Set-Cookie", c.output(header="")) for c in response.cookies.values()])
        return response

    def finished(**kwargs: Any) -> None:  # what closes the thread's database connections
        threads["closed"] = threading.get_ident()

    request_finished.connect(finished)
    try:
        sent = run(ThreadedDjango(wsgi, threads=2), scope_of("/x"), b"")
    finally:
        request_finished.disconnect(finished)
    assert [m["type"] for m in sent] == ["http.response.start"] + ["http.response.body"] * 3
    assert [m.get("body") for m in sent[1:]] == [b"one", b"two", b""]  # each as it came
    assert [m.get("more_body", False) for m in sent[1:]] == [True, True, False]
    assert (b"set-cookie", b"k=v; Path=/") in sent[0]["headers"]  # no leading space
    assert threads["closed"] == threads["called"] != threading.get_ident()


def test_a_whole_answer_is_sent_from_the_loop_in_one_body():
    def wsgi(environ: dict, start_response: Any) -> HttpResponse:
        response = HttpResponse(environ["wsgi.input"].read(), status=202)
        start_response("202 Accepted", list(response.items()))
        return response

    sent = run(ThreadedDjango(wsgi, threads=1), scope_of("/x"), b"payload")
    assert sent[0]["status"] == 202 and sent[1] == {"type": "http.response.body",
                                                     "body": b"payload"}


def test_a_client_gone_before_its_body_calls_nothing_and_sends_nothing():
    called: list[bool] = []
    sent = run(ThreadedDjango(lambda environ, start: called.append(True) or [],  # type: ignore[arg-type,func-returns-value]
                              threads=1), scope_of("/x"), None)
    assert sent == [] and called == []


def test_lifespan_is_refused_as_djangos_handler_refuses_it():
    with pytest.raises(ValueError, match="not lifespan"):
        run(ThreadedDjango(lambda e, s: [], threads=1), {"type": "lifespan"}, b"")


def test_a_file_goes_out_in_blocks_not_in_reads(tmp_path):
    path = tmp_path / "app.js"
    path.write_bytes(b"x" * 150_000)

    def wsgi(environ: dict, start_response: Any) -> FileResponse:
        response = FileResponse(path.open("rb"))
        start_response("200 OK", list(response.items()))
        return response

    sent = run(ThreadedDjango(wsgi, threads=1), scope_of("/static/app.js"), b"")
    bodies = [m["body"] for m in sent[1:]]
    assert b"".join(bodies) == path.read_bytes()
    assert len(bodies) <= 4, [len(b) for b in bodies]  # FileResponse reads 4 KiB at a time
