"""A submitted document, its processing runs, and the facts its processing extracted."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Document(models.Model):
    class State(models.TextChoices):
        QUEUED = "queued"
        PROCESSING = "processing"
        DONE = "done"
        FAILED = "failed"

    class Source(models.TextChoices):
        PASTE = "paste"
        UPLOAD = "upload"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    title = models.CharField(max_length=200)
    source = models.CharField(max_length=10, choices=Source.choices)
    filename = models.CharField(max_length=255, blank=True)
    content = models.TextField()
    size_bytes = models.PositiveIntegerField()
    state = models.CharField(max_length=12, choices=State.choices, default=State.QUEUED)
    # The fence of the state machine: only the run holding the current token may finish.
    claim_token = models.UUIDField(null=True, blank=True)
    # How many times processing started; more than one means a redelivery or a retry.
    starts = models.PositiveIntegerField(default=0)
    # Which message may run it: every re-enqueue by the recovery (or by hand) counts one up,
    # and the message carries it (header ``platform_generation``). A copy of an older message
    # (one kombu restores long after its worker died) is skipped, whatever its timing.
    # db_default too: the release before this field keeps inserting rows during an upgrade.
    generation = models.PositiveIntegerField(default=0, db_default=0)
    # Set while a retry waits out its countdown in a worker (an ETA message, held by whoever
    # fetched it): until then the document is queued but its message is in no queue.
    retry_at = models.DateTimeField(null=True, blank=True)
    summary = models.TextField(blank=True)
    word_count = models.PositiveIntegerField(null=True, blank=True)
    failure_reason = models.TextField(blank=True)
    processed_by = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["owner", "-created_at"]), models.Index(fields=["state"]),
                   # The recovery's orphan check: queued documents older than a moment.
                   models.Index(fields=["state", "updated_at"])]

    def __str__(self) -> str:
        return f"{self.title} ({self.state})"


class DocumentRun(models.Model):
    """One start of processing: which worker, when, and how it ended."""

    class Outcome(models.TextChoices):
        RUNNING = "running"  # still running, or its worker died
        DONE = "done"
        FAILED = "failed"
        RETRYING = "retrying"
        SUPERSEDED = "superseded"  # another run took the claim; this one's result was dropped

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="runs")
    task_id = models.CharField(max_length=64)
    worker = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()  # the pool process that runs it
    # The worker's main process (its heartbeat names it): a worker restarted under the same
    # name has a new one, so its predecessor's runs are seen as dead. Null on runs recorded
    # before issue 16, which are judged by the pool process alone.
    worker_pid = models.PositiveIntegerField(null=True, blank=True)
    redelivered = models.BooleanField(default=False)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=12, choices=Outcome.choices, default=Outcome.RUNNING)
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["started_at", "id"]
        # The recovery reads the running runs every second: few rows among many.
        indexes = [models.Index(fields=["outcome"])]


class DocumentFact(models.Model):
    """A fact extracted from a document (an e-mail address, a link, a number, a key word).

    Written only in the transaction that moves the document to done, so a redelivered task
    cannot add a second set.
    """

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="facts")
    kind = models.CharField(max_length=20)
    value = models.CharField(max_length=255)

    class Meta:
        ordering = ["kind", "id"]
