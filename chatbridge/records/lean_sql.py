"""Lean UPDATE, INSERT and SELECT statements for the writer's hot path.

The ORM builds, clones and compiles a query for every call (150–250 µs of Python per
statement here, several times the statement itself); the journal and status writes of every
answer and question pay that many times over. These helpers build each statement's SQL once
per model, field names and database vendor, and convert values with the model fields' own
``get_db_prep_value`` (so JSON, datetimes and UUIDs are stored exactly as the ORM stores them,
on SQLite and PostgreSQL alike). Only what the ORM would do for plain columns is done here:
no signals, no ``auto_now`` (callers pass ``updated_at``), no related lookups.

Values are stored with NUL characters replaced (``chatbridge.author.storable``): what reaches
here was made by the server (a model's reply, a tool's result or log line; text from outside
with NUL is refused where it enters), and PostgreSQL refuses NUL where SQLite keeps it.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Field, Model
from django.utils import timezone

from chatbridge.author.storable import nul_at, scrubbed

__all__ = ["JsonText", "append_numbered", "insert", "max_of", "rows", "select", "update"]


def update(model: type[Model], values: dict[str, Any], **where: Any) -> int:
    """``UPDATE`` the rows of ``model`` matching ``where`` (``None`` means ``IS NULL``) with
    ``values``; the number of rows changed."""
    names, keys = tuple(values), tuple(where)
    nulls = tuple(k for k in keys if where[k] is None)
    sql, fields = _update_sql(model, names, keys, nulls, connection.vendor)
    given = [*map(_storable, values.values()), *(v for v in where.values() if v is not None)]
    params = [_prep(f, v) for f, v in zip(fields, given, strict=True)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def insert(
    model: type[Model],
    values: dict[str, Any],
    *,
    unless: tuple[str, ...] = (),
    else_set: tuple[str, ...] = (),
    while_null: str = "",
) -> int:
    """``INSERT`` one row of ``model``: ``values`` and, for every other column, its field's
    default (as ``Model.save`` would; an auto primary key is left to the database). The
    number of rows written.

    ``unless``: the columns of a unique constraint; a row already holding those values is
    kept (nothing inserted: 0), or, with ``else_set``, its ``else_set`` columns take this
    row's values (only if its ``while_null`` column is still NULL, when given): one statement
    where a read would otherwise decide between an insert and an update."""
    row = {**_defaults(model), **{k: _storable(v) for k, v in values.items()}}
    sql, fields = _insert_sql(model, tuple(row), unless, else_set, while_null, connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql, [_prep(f, v) for f, v in zip(fields, row.values(), strict=True)])
        return int(cursor.rowcount)


def append_numbered(
    model: type[Model], values: dict[str, Any], number: str, within: str, key: str
) -> int:
    """``INSERT`` one row of ``model`` numbered one past the largest ``number`` of the rows
    with its ``within`` value (1 for the first), unless a row with its ``key`` (a unique
    column) exists: the rows written (0 or 1). One statement; the caller holds a lock that
    makes it the only writer of ``within``'s numbers."""
    row = {**_defaults(model), **{k: _storable(v) for k, v in values.items()}}
    row.pop(number, None)
    sql, fields = _numbered_sql(model, tuple(row), number, within, key, connection.vendor)
    params = [_prep(f, v) for f, v in zip(fields, [*row.values(), row[within]], strict=True)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def select(
    model: type[Model], columns: tuple[str, ...], *, for_update: bool = False, **where: Any
) -> tuple[Any, ...] | None:
    """The first row's ``columns`` of ``model`` matching ``where`` (JSON decoded, other values
    as the database gives them), locked for the transaction with ``for_update`` where the
    database locks rows."""
    found = _query(model, columns, where, "", 1, for_update)
    return found[0] if found else None


def rows(model: type[Model], columns: tuple[str, ...], order_by: str, **where: Any) -> list[Any]:
    """Every matching row's ``columns``, in ``order_by`` order (a column name)."""
    return _query(model, columns, where, order_by, 0, False)


def max_of(model: type[Model], column: str, **where: Any) -> Any:
    """The largest ``column`` of the matching rows (``None`` when there are none)."""
    sql, fields = _max_sql(model, column, tuple(where), connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql, [_prep(f, v) for f, v in zip(fields, where.values(), strict=True)])
        row = cursor.fetchone()
    return row[0] if row else None


def _query(
    model: type[Model],
    columns: tuple[str, ...],
    where: dict[str, Any],
    order_by: str,
    limit: int,
    for_update: bool,
) -> list[tuple[Any, ...]]:
    lock = for_update and connection.features.has_select_for_update
    sql, fields, decoders = _select_sql(
        model, columns, tuple(where), order_by, limit, lock, connection.vendor
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [_prep(f, v) for f, v in zip(fields, where.values(), strict=True)])
        found = cursor.fetchall()
    return [_decoded(row, decoders) for row in found]


def _decoded(row: tuple[Any, ...], decoders: list[Any]) -> tuple[Any, ...]:
    return tuple(
        v if d is None else d.from_db_value(v, None, connection)
        for v, d in zip(row, decoders, strict=True)
    )


class JsonText(str):
    """The JSON text of a JSON field's value, made already: written as it is (a value is
    turned to text once), unless it holds a NUL (``\\u0000``), which is scrubbed as a value's."""


def _storable(value: Any) -> Any:
    if isinstance(value, JsonText):
        return scrubbed(json.loads(value)) if "\\u0000" in value else value
    if isinstance(value, str | dict | list) and nul_at(value) is not None:
        return scrubbed(value)
    return value


def _prep(field: Field[Any, Any], value: Any) -> Any:
    if isinstance(value, JsonText):
        return _json_param(str(value))
    return field.get_db_prep_save(value, connection)


def _json_param(text: str) -> Any:
    """A JSON column's parameter for ``text``: on PostgreSQL psycopg's ``Jsonb`` (as Django's
    own), which sends the text as it is; elsewhere the text."""
    if connection.vendor != "postgresql":
        return text
    from psycopg.types.json import Jsonb

    return Jsonb(None, dumps=lambda _: text)


def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field) and field.concrete, f"{model.__name__}.{name} is no column"
    return field


def _column(model: type[Model], name: str) -> str:
    return str(connection.ops.quote_name(str(_field(model, name).column)))


def _table(model: type[Model]) -> str:
    return str(connection.ops.quote_name(model._meta.db_table))


@cache
def _update_sql(
    model: type[Model],
    names: tuple[str, ...],
    keys: tuple[str, ...],
    nulls: tuple[str, ...],
    vendor: str,
) -> tuple[str, list[Field[Any, Any]]]:
    sets = ", ".join(f"{_column(model, n)} = %s" for n in names)
    conditions = " AND ".join(
        f"{_column(model, k)} IS NULL" if k in nulls else f"{_column(model, k)} = %s" for k in keys
    )
    fields = [_field(model, n) for n in (*names, *(k for k in keys if k not in nulls))]
    return f"UPDATE {_table(model)} SET {sets} WHERE {conditions}", fields


@cache
def _insert_sql(
    model: type[Model],
    names: tuple[str, ...],
    unless: tuple[str, ...],
    else_set: tuple[str, ...],
    while_null: str,
    vendor: str,
) -> tuple[str, list[Field[Any, Any]]]:
    columns = ", ".join(_column(model, n) for n in names)
    marks = ", ".join("%s" for _ in names)
    fields = [_field(model, n) for n in names]
    sql = f"INSERT INTO {_table(model)} ({columns}) VALUES ({marks})"
    return sql + _on_conflict(model, unless, else_set, while_null), fields


def _on_conflict(
    model: type[Model], unless: tuple[str, ...], else_set: tuple[str, ...], while_null: str
) -> str:
    """SQLite (3.24+) and PostgreSQL spell an upsert alike."""
    if not unless:
        return ""
    target = ", ".join(_column(model, n) for n in unless)
    if not else_set:
        return f" ON CONFLICT ({target}) DO NOTHING"
    sets = ", ".join(f"{_column(model, n)} = excluded.{_column(model, n)}" for n in else_set)
    sql = f" ON CONFLICT ({target}) DO UPDATE SET {sets}"
    if while_null:
        sql += f" WHERE {_table(model)}.{_column(model, while_null)} IS NULL"
    return sql


@cache
def _numbered_sql(
    model: type[Model], names: tuple[str, ...], number: str, within: str, key: str, vendor: str
) -> tuple[str, list[Field[Any, Any]]]:
    table, counted = _table(model), _column(model, number)
    columns = ", ".join([*(_column(model, n) for n in names), counted])
    fields = [*(_field(model, n) for n in names), _field(model, within)]
    # PostgreSQL types a SELECT's untyped values as text, which no column but text takes.
    marks = ", ".join(
        f"CAST(%s AS {f.cast_db_type(connection)})" if vendor == "postgresql" else "%s"
        for f in fields[:-1]
    )
    # The SELECT has a WHERE, as SQLite wants before an upsert clause (its parser otherwise
    # reads ON CONFLICT as a join's ON).
    sql = (
        f"INSERT INTO {table} ({columns}) SELECT {marks}, COALESCE(MAX({counted}), 0) + 1 "
        f"FROM {table} WHERE {_column(model, within)} = %s"
    )
    return sql + _on_conflict(model, (key,), (), ""), fields


@cache
def _select_sql(
    model: type[Model],
    columns: tuple[str, ...],
    keys: tuple[str, ...],
    order_by: str,
    limit: int,
    lock: bool,
    vendor: str,
) -> tuple[str, list[Field[Any, Any]], list[Any]]:
    wanted = ", ".join(_column(model, c) for c in columns)
    conditions = " AND ".join(f"{_column(model, k)} = %s" for k in keys)
    sql = f"SELECT {wanted} FROM {_table(model)} WHERE {conditions}"
    if order_by:
        sql += f" ORDER BY {_column(model, order_by)}"
    if limit:
        sql += f" LIMIT {int(limit)}"
    if lock:
        sql += " FOR UPDATE"
    fields = [_field(model, k) for k in keys]
    decoders = [
        f if f.get_internal_type() == "JSONField" else None
        for f in (_field(model, c) for c in columns)
    ]
    return sql, fields, decoders


@cache
def _max_sql(
    model: type[Model], column: str, keys: tuple[str, ...], vendor: str
) -> tuple[str, list[Field[Any, Any]]]:
    conditions = " AND ".join(f"{_column(model, k)} = %s" for k in keys)
    sql = f"SELECT MAX({_column(model, column)}) FROM {_table(model)} WHERE {conditions}"
    return sql, [_field(model, k) for k in keys]


def _defaults(model: type[Model]) -> dict[str, Any]:
    """Every column's value when nothing is given, as ``Model.save`` would insert it."""
    now = timezone.now()
    return {
        f.attname: now if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)
        else f.get_default()
        for f in _plain_fields(model)
    }  # fmt: skip


@cache
def _plain_fields(model: type[Model]) -> tuple[Field[Any, Any], ...]:
    """The columns an INSERT gives (all but an auto-incremented primary key)."""
    pk = model._meta.pk
    auto = pk is not None and pk.get_internal_type().endswith("AutoField")
    return tuple(f for f in model._meta.concrete_fields if not (auto and f is pk))
