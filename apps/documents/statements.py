"""The submit's, the claim's and the finish's writes as SQL: no Python between BEGIN and COMMIT.

A claim and a finish each write three statements in one transaction, and on SQLite that
transaction holds the database's one write lock from its BEGIN (``IMMEDIATE``) to the end of
its commit. Through the ORM each statement was built inside that window (the ORM's
compilers were 16 % of the worker's Python samples); and a process the kernel takes off the
CPU there (two cores, a dozen processes) keeps every other writer waiting for its time
slice, more often the more processes share the cores (adr/0043). Here each statement's text
is built once, from the models' own table and column names (``Model._meta``), and its
parameters are converted by the fields themselves (``Field.get_db_prep_value``, as the ORM
converts them) before the transaction opens; inside it, only ``cursor.execute``: Django's
documented way to run SQL
(https://docs.djangoproject.com/en/5.2/topics/db/sql/#executing-custom-sql-directly), the
same text on SQLite and PostgreSQL (``INSERT ... RETURNING``: SQLite 3.35 or later).
The submit's one INSERT (autocommit: its own transaction) is written the same way, its values
made by the fields as ``save()`` makes them (``Field.pre_save``: defaults, ``auto_now``);
Document has no save signals to skip. The rarer writes (a failure, a retry, too many starts)
stay in the ORM (services.py).
"""

from __future__ import annotations

import sqlite3
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models import Model

from apps.sql_names import column, table

from .models import Document, DocumentFact, DocumentRun

if sqlite3.sqlite_version_info < (3, 35):  # RETURNING; Debian 12 has 3.40
    raise ImproperlyConfigured(f"SQLite 3.35 or later is needed, found {sqlite3.sqlite_version}")

# Plain strings: a driver may send an Enum member by its name (psycopg does).
PROCESSING, DONE = str(Document.State.PROCESSING), str(Document.State.DONE)
RUNNING, FINISHED, SUPERSEDED = (str(DocumentRun.Outcome.RUNNING),
                                 str(DocumentRun.Outcome.DONE),
                                 str(DocumentRun.Outcome.SUPERSEDED))
SUPERSEDED_DETAIL = "claim taken by a later run"
DROPPED_DETAIL = "result dropped: the claim had moved on"


def _sets(model: type[Model], fields: tuple[str, ...]) -> str:
    return ", ".join(f"{column(model, f)} = %s" for f in fields)


def _where(model: type[Model], fields: tuple[str, ...]) -> str:
    return " AND ".join(f"{column(model, f)} = %s" for f in fields)


def _prep(model: type[Model], fields: tuple[str, ...], values: tuple[Any, ...]) -> list[Any]:
    """The values as the ORM would send them for these fields (dates, UUIDs per backend)."""
    meta = model._meta
    return [meta.get_field(f).get_db_prep_value(v, connection)
            for f, v in zip(fields, values, strict=True)]


# --- the claim: a compare-and-set on the row, the dead runs superseded, the new run --------
CLAIM_SET = ("state", "claim_token", "starts", "processed_by", "retry_at", "updated_at",
             "generation")
CLAIM_WHERE = ("id", "state", "generation", "starts")
SUPERSEDE_SET = ("outcome", "finished_at", "detail")
SUPERSEDE_WHERE = ("document", "outcome")
RUN_COLUMNS = ("document", "task_id", "worker", "worker_pid", "pid", "redelivered", "outcome",
               "started_at", "detail")
# --- the finish: the row done if the claim is still this run's, its facts, the run closed --
DONE_SET = ("state", "summary", "word_count", "failure_reason", "claim_token", "finished_at",
            "updated_at")
FENCE_WHERE = ("id", "state", "claim_token")
FACT_COLUMNS = ("document", "kind", "value")
CLOSE_SET = ("outcome", "finished_at", "detail")
# --- the claim's read: what it judges the row by, outside any transaction ---------------------
READ_COLUMNS = ("state", "generation", "starts", "content", "owner", "title", "word_count")
# --- the submit: the new row, every column but the id -----------------------------------------
SUBMIT_FIELDS = tuple(f for f in Document._meta.concrete_fields if not f.primary_key)
SUBMIT_COLUMNS = tuple(f.name for f in SUBMIT_FIELDS)


def _update(model: type[Model], sets: tuple[str, ...], where: tuple[str, ...]) -> str:
    return f"UPDATE {table(model)} SET {_sets(model, sets)} WHERE {_where(model, where)}"


def _insert(model: type[Model], columns: tuple[str, ...]) -> str:
    return (f"INSERT INTO {table(model)} ({', '.join(column(model, f) for f in columns)}) "
            f"VALUES ({', '.join(['%s'] * len(columns))})")


CLAIM_SQL = _update(Document, CLAIM_SET, CLAIM_WHERE)
SUPERSEDE_SQL = _update(DocumentRun, SUPERSEDE_SET, SUPERSEDE_WHERE)
RUN_SQL = f"{_insert(DocumentRun, RUN_COLUMNS)} RETURNING {column(DocumentRun, 'id')}"
DONE_SQL = _update(Document, DONE_SET, FENCE_WHERE)
FACT_SQL = _insert(DocumentFact, FACT_COLUMNS)
CLOSE_SQL = _update(DocumentRun, CLOSE_SET, ("id",))
SUBMIT_SQL = f"{_insert(Document, SUBMIT_COLUMNS)} RETURNING {column(Document, 'id')}"
READ_SQL = (f"SELECT {', '.join(column(Document, f) for f in READ_COLUMNS)} "
            f"FROM {table(Document)} WHERE {column(Document, 'id')} = %s")
# Keys as the ORM's ``values()`` names them: a foreign key by its attname (owner_id).
READ_KEYS = tuple(Document._meta.get_field(f).attname for f in READ_COLUMNS)


def read(document_id: int) -> dict[str, Any] | None:
    """The row's ``READ_KEYS``, as ``Document.objects.filter(pk=...).values(...).first()``
    would give them (none of them needs a converter: text and integers), or None."""
    with connection.cursor() as cursor:
        cursor.execute(READ_SQL, [document_id])
        row = cursor.fetchone()
    return None if row is None else dict(zip(READ_KEYS, row, strict=True))


def submit(document: Document) -> None:
    """In autocommit: ``document`` (new, unsaved) inserted as ``save()`` would, committed,
    and its id set. Raises as the ORM does (the driver's errors, through Django's wrapper)."""
    if connection.in_atomic_block:
        raise RuntimeError("statements.submit commits on its own; call it outside atomic")
    params = [field.get_db_prep_save(field.pre_save(document, True), connection)
              for field in SUBMIT_FIELDS]
    with connection.cursor() as cursor:  # closed at once: the statement ends, and commits
        cursor.execute(SUBMIT_SQL, params)
        document.pk = int(cursor.fetchone()[0])


@dataclass(frozen=True)
class ClaimWrite:
    claim: list[Any]
    supersede: list[Any]
    run: list[Any]


def claim_write(*, document_id: int, as_read: dict[str, Any], token: uuid.UUID, worker: str,
                generation: int, task_id: str, worker_pid: int, pid: int, redelivered: bool,
                now: datetime) -> ClaimWrite:
    """The claim's parameters, prepared before its transaction opens. ``as_read``: the row's
    ``state``, ``generation`` and ``starts`` when it was judged."""
    return ClaimWrite(
        claim=_prep(Document, CLAIM_SET + CLAIM_WHERE, (
            PROCESSING, token, as_read["starts"] + 1, worker, None, now, generation,
            document_id, as_read["state"], as_read["generation"], as_read["starts"])),
        supersede=_prep(DocumentRun, SUPERSEDE_SET, (SUPERSEDED, now,
                                                      SUPERSEDED_DETAIL))
        + [document_id, RUNNING],
        run=[document_id, *_prep(DocumentRun, RUN_COLUMNS[1:], (
            task_id, worker, worker_pid, pid, redelivered, RUNNING, now, ""))],
    )


def claim(write: ClaimWrite) -> int | None:
    """Inside the caller's transaction: the new run's id, or None if the row moved since it
    was read (nothing written)."""
    with connection.cursor() as cursor:
        cursor.execute(CLAIM_SQL, write.claim)
        if cursor.rowcount != 1:
            return None
        # Runs still marked running belong to a process that died: this claim supersedes them.
        cursor.execute(SUPERSEDE_SQL, write.supersede)
        cursor.execute(RUN_SQL, write.run)
        return int(cursor.fetchone()[0])


@dataclass(frozen=True)
class DoneWrite:
    done: list[Any]
    facts: list[list[Any]]
    close_done: list[Any]
    close_dropped: list[Any]


def done_write(*, document_id: int, token: uuid.UUID, run_id: int, summary: str,
               word_count: int, facts: list[tuple[str, str]], now: datetime) -> DoneWrite:
    """The finish's parameters, prepared before its transaction opens."""
    return DoneWrite(
        done=_prep(Document, DONE_SET + FENCE_WHERE, (
            DONE, summary, word_count, "", None, now, now,
            document_id, PROCESSING, token)),
        facts=[[document_id, *_prep(DocumentFact, FACT_COLUMNS[1:], (kind, value))]
               for kind, value in facts],
        close_done=_prep(DocumentRun, CLOSE_SET, (FINISHED, now, "")) + [run_id],
        close_dropped=_prep(DocumentRun, CLOSE_SET, (SUPERSEDED, now, DROPPED_DETAIL))
        + [run_id],
    )


def finish_done(write: DoneWrite) -> bool:
    """Inside the caller's transaction: the row done, its facts and the run closed, if the
    claim is still this run's (True); else only the run, closed as superseded (False)."""
    with connection.cursor() as cursor:
        cursor.execute(DONE_SQL, write.done)
        if cursor.rowcount != 1:
            cursor.execute(CLOSE_SQL, write.close_dropped)
            return False
        if write.facts:
            cursor.executemany(FACT_SQL, write.facts)
        cursor.execute(CLOSE_SQL, write.close_done)
        return True
