"""Report runs on the live pages: each periodic run's start and outcome, published on the bus.

``run_publish`` is called with one line from the run's service at its start and at its end;
the Reports page and the notifications page update from the event. The event carries the
run's state, not its content, and goes to every logged-in user (the Reports page is open to
all of them); it is published after the commit and never fails the run.
"""

from __future__ import annotations

from apps.events.bus import publish_event_on_commit

from .models import JobRun

RUN_KIND = "report.run"


def run_publish(*, run_id: int) -> None:
    """Publish the current state of run ``run_id`` (started, done, failed, lost)."""
    run = JobRun.objects.filter(pk=run_id).first()
    if run is None:
        return
    publish_event_on_commit(kind=RUN_KIND, user_id=None, data={
        "id": run.pk,
        "report": run.job,
        "kind": run.kind,
        "outcome": run.outcome,
        "slot": run.slot.timestamp(),
        "started": run.started_at.timestamp() if run.started_at else None,
        "finished": run.finished_at.timestamp() if run.finished_at else None,
        "worker": run.worker[:100],
        "detail": (run.detail or "")[:300],
    })
