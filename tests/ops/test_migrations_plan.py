"""The upgrade refuses a migration the release still serving cannot live with."""

from __future__ import annotations

from django.db import models
from django.db.migrations.operations import AddField, RunSQL

from apps.ops.migrations_plan import breaks_the_running_release


def test_a_not_null_column_without_a_database_default_breaks_the_running_release():
    # The older code inserts rows without the column: each insert fails (the drill's 500s).
    assert breaks_the_running_release(
        AddField("document", "generation", models.PositiveIntegerField(default=0)))
    # Kept in the table by db_default, or nullable: the older code's inserts go on.
    assert not breaks_the_running_release(
        AddField("document", "generation", models.PositiveIntegerField(default=0,
                                                                       db_default=0)))
    assert not breaks_the_running_release(
        AddField("document", "retry_at", models.DateTimeField(null=True)))
    assert not breaks_the_running_release(RunSQL("SELECT 1", reverse_sql="SELECT 1"))
