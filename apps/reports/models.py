"""Runs of the periodic jobs (the slot fence) and the usage roll-up they produce."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class JobRun(models.Model):
    """One run of a periodic job. A scheduled slot has at most one row: the fence.

    However often a slot is fired (two beats, a clock jump, a Redis failover, a redelivered
    message), only the delivery that inserts this row does the slot's work. Manual runs are
    outside that constraint, so they can never take or block a scheduled slot; each manual
    run has at most one row per task id, its own fence.
    """

    class Kind(models.TextChoices):
        SCHEDULED = "scheduled"
        MANUAL = "manual"

    class Outcome(models.TextChoices):
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        LOST = "lost"  # its worker died mid-run (found by the job's next run)

    job = models.CharField(max_length=100)  # the stable task name, scheduler/tables.py
    kind = models.CharField(max_length=10, choices=Kind.choices)
    # Scheduled: the grid slot's start. Manual: when the run was requested.
    slot = models.DateTimeField()
    # First slot this run's work covers: earlier than ``slot`` when it catches up missed ones.
    covers_from = models.DateTimeField()
    fired_by = models.CharField(max_length=255, blank=True)  # beat token, or who ran it by hand
    task_id = models.CharField(max_length=64, blank=True)
    worker = models.CharField(max_length=255, blank=True)
    # The worker's main process, as its heartbeat names it: tells a dead run from a live one
    # even after a restarted worker takes the same name.
    worker_pid = models.PositiveIntegerField(null=True, blank=True)
    # The pool process that ran it: a pool child killed mid-run (OOM, hard time limit) leaves
    # the main process's heartbeat alive, so the child's pid must be checked too.
    pool_pid = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=10, choices=Outcome.choices, default=Outcome.RUNNING)
    detail = models.TextField(blank=True)
    # Later deliveries of this slot that the fence turned away.
    duplicates = models.PositiveIntegerField(default=0)
    # Deliveries that ran it: a takeover of a failed or lost attempt adds one; bounded, so a
    # pool process that dies every time cannot repeat it forever.
    attempts = models.PositiveIntegerField(default=1, db_default=1)

    class Meta:
        ordering = ["-slot", "-id"]
        constraints = [
            # A manual run is fenced by its task id, as a slot by its start: a redelivered
            # message is the same run, never a second one.
            models.UniqueConstraint(
                fields=["job", "task_id"],
                condition=models.Q(kind="manual") & ~models.Q(task_id=""),
                name="reports_one_run_per_manual_task",
            ),
            models.UniqueConstraint(
                fields=["job", "slot"],
                condition=models.Q(kind="scheduled"),
                name="reports_one_run_per_scheduled_slot",
            ),
        ]
        indexes = [models.Index(fields=["job", "kind", "outcome", "-slot"])]

    def __str__(self) -> str:
        return f"{self.job} {self.kind} {self.slot:%Y-%m-%d %H:%M:%S} ({self.outcome})"


class JobEffect(models.Model):
    """One side effect of a run, done: a digest e-mail to one user, one roll-up window, a purge.

    A second run of the same slot (a retry, a second delivery, a takeover of a failed or lost
    run) finds the effects already done and skips them, so each happens once per slot.
    """

    run = models.ForeignKey(JobRun, on_delete=models.CASCADE, related_name="effects")
    key = models.CharField(max_length=200)  # e.g. "digest:user:12", "rollup", "purge"
    done_at = models.DateTimeField(auto_now_add=True)
    detail = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["run_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "key"], name="reports_one_effect_per_run"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} {self.key}"


class UsageRollup(models.Model):
    """One user's usage in one roll-up period: documents submitted and words processed."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    period_start = models.DateTimeField()
    period_seconds = models.PositiveIntegerField()
    documents = models.PositiveIntegerField(default=0)
    words = models.PositiveIntegerField(default=0)
    computed_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-period_start", "user_id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "period_start"], name="reports_one_rollup"),
        ]
