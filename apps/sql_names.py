"""A model's table and column names, quoted for SQL text built once.

The statements the hot paths run as SQL (apps/documents/statements.py, the usage count in
apps/metering/backends.py, the session lookup in apps/session_store.py) name tables and
columns from the models themselves (``Model._meta``, Django's documented model API), never
spelt by hand, so a renamed field or table changes the SQL with it. Standard SQL quoting, the
same on SQLite and PostgreSQL. Shared plumbing: imports nothing of the apps.
"""

from __future__ import annotations

from django.db.models import Model


def quote(name: str) -> str:
    return f'"{name}"'


def table(model: type[Model]) -> str:
    return quote(model._meta.db_table)


def column(model: type[Model], field: str) -> str:
    return quote(model._meta.get_field(field).column)
