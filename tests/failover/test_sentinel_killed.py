"""SIGKILL one sentinel (the first one every client asks): nothing notices.

Two sentinels still make the quorum; no failover starts. Submissions, processing, the beat
and live streams go on; a process started afterwards (a worker, ``manage.py status``) finds
the primary through the remaining sentinels; no platform process logs an error.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.failover.conftest import sse_clients  # noqa: F401
from tests.failover.test_primary_killed import Submitter
from tests.failover.test_streams import messages, publish
from tests.notifications.conftest import cookie_of, spread_clients
from tests.procs import wait_until

pytestmark = [pytest.mark.processes, pytest.mark.past_one_box]

ERRORS = ("ERROR", "CRITICAL", "Traceback")


def test_a_sentinel_sigkilled_nothing_notices(sentinel_stack, sse_clients, measure):  # noqa: F811
    stack = sentinel_stack(env={"DOCUMENTS_PROCESSING_SECONDS": "0.2"})
    group = stack.redis.group
    web = stack.start_web(workers=2)
    procs = [web.proc, stack.start_worker("w1"), stack.start_elected_beat("beat1")]
    clients = spread_clients(web, cookie_of(web.session()), per_worker=1)
    sse_clients.extend(clients)
    submitter = Submitter(web.session())
    thread = threading.Thread(target=submitter.run, daemon=True)
    thread.start()
    wait_until(lambda: len(submitter.accepted()) >= 5, timeout=30, what="submissions flow")
    primary = group.primary()
    logged = {p.name: len(p.log()) for p in procs}

    killed_at = time.time()
    group.kill_sentinel(0)  # the first address in REDIS_SENTINELS: every client tries it first
    # New connections after the kill: a new worker process, and a status command.
    late = stack.start_worker("w2")
    procs.append(late)
    logged[late.name] = 0
    status = json.loads(stack.manage("status", "--json").stdout)
    assert status["redis"]["role"] == "master", status["redis"]
    wait_until(lambda: sum(1 for sent, status, _ in submitter.answers
                           if sent > killed_at and status == 202) >= 20,
               timeout=60, what="submissions go on")
    submitter.stop.set()
    thread.join(timeout=30)
    publish(stack, "after")
    wait_until(lambda: all("after" in messages(c) for c in clients), timeout=20,
               what="streams go on")
    ids = submitter.accepted()
    wait_until(lambda: stack.query(
        "SELECT COUNT(*) FROM documents_document WHERE state = 'done' AND id IN ("
        + ",".join("?" * len(ids)) + ")", *ids)[0][0] == len(ids),
        timeout=60, interval=0.5, what="every document done")

    assert {status for _, status, _ in submitter.answers} == {202}
    assert not any(c.of_kind("resync") for c in clients), "a stream was cut"
    assert group.primary() is primary and group.failovers() == 0, "a failover started"
    errors = [line for p in procs for line in p.log()[logged[p.name]:].splitlines()
              if any(word in line for word in ERRORS)]
    assert errors == [], errors
    measure(submitted_after_kill=sum(1 for sent, _, _ in submitter.answers if sent > killed_at),
            answered_503=0, streams_cut=0, failovers=0, errors_logged=0)
