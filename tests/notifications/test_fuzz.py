"""No input to the JSON API, the upload form or the stream parameters returns 500, and a
refused request changes nothing. A fast subset of loadtests/fuzz_endpoints.py, same checks,
against a real uvicorn, Redis and database."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.notifications.fuzzing import (
    CURSORS,
    STREAM_TARGETS,
    Tally,
    json_bodies,
    open_stream,
    post_json,
    post_upload,
    stream_case,
    uploads,
)

pytestmark = pytest.mark.processes

FAST = settings(max_examples=90, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


def test_fuzzed_inputs_never_get_500_and_refusals_change_nothing(make_stack, measure):
    stack = make_stack(env={"METERING_DAILY_LIMIT": "1000000"})
    web = stack.start_web(workers=1)
    client = web.session()
    tally = Tally()

    @FAST
    @given(json_bodies())
    def json_api(case: tuple[str, bytes]) -> None:
        post_json(stack, client, tally, *case)

    @FAST
    @given(uploads())
    def upload_form(form: dict) -> None:
        post_upload(stack, client, tally, form)

    @FAST
    @given(st.sampled_from(STREAM_TARGETS),
           CURSORS | st.sampled_from(["25", "0", "nan", "-1", "1e309", "50.0000001"]))
    def stream_params(target: str, value: str) -> None:
        stream_case(stack, client, tally, target, value)

    json_api()
    upload_form()
    stream_params()
    # The deep-nesting case of the issue, always, whatever Hypothesis drew.
    post_json(stack, client, tally, "application/json", b"[" * 100_000)
    stream_case(stack, client, tally, "last-event-id", "²-0")
    stream_case(stack, client, tally, "last-event-id", "1" * 5000 + "-0")
    # The cases of issue 17: 1,001 parameters on each stream, a lone surrogate in the text
    # and in the title.
    for path in ("/api/notifications/stream/", "/api/telemetry/stream/"):
        open_stream(stack, client, tally, path + "?" + "&".join(["a=1"] * 1001), {})
    for body in (b'{"text":"\\ud800 x"}', b'{"title":"\\udfff","text":"x"}'):
        before = tally.statuses[400]
        post_json(stack, client, tally, "application/json", body)
        assert tally.statuses[400] == before + 1, body
    assert tally.server_errors == []
    assert tally.changed_by_refusal == []
    assert tally.statuses[400] > 0 and tally.statuses[200] > 0
    measure(cases=tally.cases, statuses=dict(sorted(tally.statuses.items())))
