"""The election under network faults: a fault proxy between each beat and Redis.

Real redis-server, `celery beat` and `celery worker` processes, jobs due every 1-2 s. The
scenarios here are the three that broke the election before the fence (issue 12): the
leader's link blackholed at the task push (it published after a newer election) and at the
last-run write (a late write re-fired a slot), and latency above the renewal interval (a
renewal the leader had given up on still extended the lock). Every scenario, repeated, runs
in loadtests/beat_network_faults.py.
"""

from __future__ import annotations

import pytest

from tests.scheduler.netfaults import SCENARIOS, Platform, check, run_scenario

pytestmark = pytest.mark.processes

IN_SUITE = ("blackhole_at_task_push", "blackhole_at_last_run_write", "latency_above_renewal")


@pytest.mark.parametrize("name", IN_SUITE)
def test_network_fault_on_the_leaders_link(make_stack, measure, name):
    scenario = SCENARIOS[name]
    platform = Platform.start(make_stack)
    try:
        verdict = run_scenario(platform, scenario)
    finally:
        platform.stop()
    measure(scenario=name, **verdict.as_dict())
    check(verdict, scenario)
