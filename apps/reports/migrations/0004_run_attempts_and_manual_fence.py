"""Manual runs fenced by their task id (issue 17), and a bounded count of attempts."""

from django.db import migrations, models


def tell_earlier_doubles_apart(apps, schema_editor):
    """Manual runs recorded twice for one task id (the redelivery bug this fence closes)
    keep their rows: the later ones' task ids get a suffix, so the constraint can hold."""
    JobRun = apps.get_model("reports", "JobRun")
    seen = set()
    for run in JobRun.objects.filter(kind="manual").exclude(task_id="").order_by("pk"):
        if (run.job, run.task_id) in seen:
            JobRun.objects.filter(pk=run.pk).update(task_id=f"{run.task_id[:40]}#{run.pk}")
        seen.add((run.job, run.task_id))


class Migration(migrations.Migration):

    dependencies = [
        ("reports", "0003_run_pool_pid_and_effects"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobrun",
            name="attempts",
            # db_default: the release before keeps inserting runs during an upgrade.
            field=models.PositiveIntegerField(db_default=1, default=1),
        ),
        # Reversible: the suffixed ids stay (they name the same runs).
        migrations.RunPython(tell_earlier_doubles_apart, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="jobrun",
            constraint=models.UniqueConstraint(
                condition=models.Q(("kind", "manual"), models.Q(("task_id", ""), _negated=True)),
                fields=("job", "task_id"), name="reports_one_run_per_manual_task"),
        ),
    ]
