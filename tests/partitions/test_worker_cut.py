"""A worker host cut from the data host while it runs long documents (longer than its
heartbeat's TTL), healed after 5 s and after 30 s (120 s: loadtests/partitions.py).

hostB and hostC each run a worker with two pool processes; hostC also runs the web (the
client submits there) and the only beat, whose recovery hands on the documents of a worker
whose heartbeat key is gone (adr/0030). Four long documents fill the four slots, so hostB
runs two. Cut hostB: its heartbeat expires 2.5 s later and hostC runs the two again, while
hostB's pool processes go on computing, unaware. Their late results are dropped (the claim's
fence, or the recovery marking the run superseded). Judged by the history checker: 0
acknowledged lost, one result per document, no effect twice, hostB's worker still running.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.partitions.conftest import Apart
from tests.partitions.worker_cut import DOCS, start_worker_cut_hosts, worker_cut
from tests.procs import Proc, Web

pytestmark = [pytest.mark.processes, pytest.mark.partitions]


@pytest.fixture(scope="module")
def started(apart: Apart) -> Iterator[tuple[Apart, Web, dict[str, Proc]]]:
    web, workers = start_worker_cut_hosts(apart)
    yield apart, web, workers


@pytest.mark.parametrize("cut_s", [5, 30])
def test_a_worker_host_cut_mid_document_loses_nothing_and_keeps_one_result(
        started: tuple[Apart, Web, dict[str, Proc]], cut_s: int, measure) -> None:
    apart, web, workers = started
    verdict, measured = worker_cut(apart, web, workers, cut_s=cut_s)
    measure(**measured)
    verdict.assert_ok()
    assert verdict.done == DOCS and verdict.dropped >= 2, measured
    assert measured["hostB_worker_alive"], "hostB's worker died of the cut"
