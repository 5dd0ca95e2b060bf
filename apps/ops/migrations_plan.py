"""What an upgrade would migrate, whether a rollback could undo it, and where a rollback goes.

Used by ``platform/upgrade`` (refuse a release whose pending migrations cannot be reversed)
and ``platform/rollback`` (migrate the newer release's schema back to the older release's
leaves before switching back to the older code).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations import AddField
from django.db.migrations.operations.base import Operation
from django.db.models import NOT_PROVIDED


@dataclass(frozen=True)
class PendingMigration:
    app: str
    name: str
    irreversible: tuple[str, ...]  # describe() of each operation that cannot be reversed
    # describe() of each operation the release still serving cannot live with while the new
    # one starts (its inserts would fail): an upgrade restarts one process at a time.
    breaks_running: tuple[str, ...] = ()


def breaks_the_running_release(operation: Operation) -> bool:
    """A NOT NULL column added without a database default: the older code, which does not
    know the column, inserts rows without it, and each insert fails until it is restarted
    (measured in the upgrade drill, tests/platform/test_upgrade_drill.py: every submit a 500).
    Django drops a field's ``default`` from the table after adding the column; ``db_default``
    stays in the table."""
    if not isinstance(operation, AddField):
        return False
    field = operation.field
    return (not field.null and not field.many_to_many
            and getattr(field, "db_default", NOT_PROVIDED) is NOT_PROVIDED)


def migrations_pending(*, database: str = DEFAULT_DB_ALIAS) -> list[PendingMigration]:
    executor = MigrationExecutor(connections[database])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [
        PendingMigration(
            app=migration.app_label,
            name=migration.name,
            irreversible=tuple(op.describe() for op in migration.operations if not op.reversible),
            breaks_running=tuple(op.describe() for op in migration.operations
                                 if breaks_the_running_release(op)),
        )
        for migration, backwards in plan
        if not backwards
    ]


def migration_leaves() -> dict[str, str]:
    """The newest migration of each app in this code: where its schema stands once migrated."""
    loader = MigrationLoader(None, ignore_no_migrations=True)  # the code's graph, no database
    return {app: name for app, name in loader.graph.leaf_nodes()}


def migrations_applied_leaves(*, database: str = DEFAULT_DB_ALIAS) -> dict[str, str]:
    """The newest applied migration of each app in the database: the schema as it stands.

    Recorded by an upgrade before it migrates, so a rollback knows where to return to even
    when the older release has no command to say it.
    """
    loader = MigrationLoader(connections[database], ignore_no_migrations=True)
    applied = set(loader.applied_migrations) & set(loader.graph.nodes)
    leaves = {}
    for app, name in applied:
        children = loader.graph.node_map[(app, name)].children
        if not any(child.key in applied and child.key[0] == app for child in children):
            leaves[app] = name
    return leaves


def migration_targets_back(*, leaves: dict[str, str],
                           database: str = DEFAULT_DB_ALIAS) -> dict[str, str]:
    """For each app this code migrated past ``leaves`` (an older release's), where to go back."""
    loader = MigrationLoader(connections[database], ignore_no_migrations=True)
    applied = loader.applied_migrations
    targets = {}
    for app, newest in loader.graph.leaf_nodes():
        if leaves.get(app) == newest:
            continue
        target = leaves.get(app, "zero")
        if target == "zero" and not any(a == app for a, _ in applied):
            continue
        if target != "zero" and (app, newest) not in applied:
            continue
        targets[app] = target
    return targets
