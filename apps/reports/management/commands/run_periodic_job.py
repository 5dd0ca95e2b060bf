"""Run a periodic job now, by hand. It is recorded as a manual run, outside the slot grid."""

from __future__ import annotations

import getpass
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from kombu.exceptions import OperationalError as KombuOperationalError
from redis.exceptions import RedisError

from apps.reports.models import JobRun
from apps.reports.services import UnknownJob, job_trigger
from apps.reports.tasks import TASKS
from scheduler.tables import JOBS


class Command(BaseCommand):
    help = "Queue one manual run of a periodic job (never taking or blocking a scheduled slot)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job", help=f"one of: {', '.join(sorted(JOBS))}")
        parser.add_argument("--wait", type=float, default=0, metavar="SECONDS",
                            help="wait up to this long for the run to finish and print it")

    def handle(self, *args: Any, job: str, wait: float, **options: Any) -> None:
        if not wait >= 0:  # also nan, which compares false with everything
            raise CommandError("--wait must be zero or more seconds")
        if wait and job in JOBS and job not in TASKS:
            # Nothing was queued: --wait follows the reports' run records (reports_jobrun).
            raise CommandError(f"{job} keeps no run record to wait for; run it without --wait "
                               "(ops.backup: the backup appears in `manage.py restore_backup`'s "
                               "list)")
        try:
            task_id = job_trigger(job_name=job, requested_by=f"manual:{getpass.getuser()}")
        except UnknownJob as exc:
            raise CommandError(str(exc)) from exc
        except (KombuOperationalError, RedisError, OSError) as exc:
            raise CommandError(f"the queue is unavailable; nothing was queued: {exc}") from exc
        self.stdout.write(f"queued manual run of {job}: task {task_id}")
        if not wait:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            run = JobRun.objects.filter(task_id=task_id).first()
            if run is not None and run.outcome != JobRun.Outcome.RUNNING:
                self.stdout.write(f"{run.outcome} on {run.worker}: {run.detail}")
                if run.outcome != JobRun.Outcome.DONE:
                    raise CommandError(f"the manual run {run.outcome}")
                return
            time.sleep(0.2)
        raise CommandError(f"no finished run within {wait} s (is a worker consuming 'reports'?)")
