"""Lean UPDATE, INSERT and SELECT statements for the writer's hot path.

The ORM builds, clones and compiles a query for every call (150–250 µs of Python per
statement here, several times the statement itself); the journal and status writes of every
answer and question pay that many times over. These helpers build each statement's SQL once
per model, field names and database vendor, and convert values with the model fields' own
``get_db_prep_value`` (so JSON, datetimes and UUIDs are stored exactly as the ORM stores them,
on SQLite and PostgreSQL alike). Only what the ORM would do for plain columns is done here:
no signals, no ``auto_now`` (callers pass ``updated_at``), no related lookups.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Field, Model
from django.utils import timezone

__all__ = ["insert", "select", "update"]


def update(model: type[Model], values: dict[str, Any], **where: Any) -> int:
    """``UPDATE`` the rows of ``model`` matching ``where`` (``None`` means ``IS NULL``) with
    ``values``; the number of rows changed."""
    names, keys = tuple(values), tuple(where)
    nulls = tuple(k for k in keys if where[k] is None)
    sql, fields = _update_sql(model, names, keys, nulls, connection.vendor)
    given = [*values.values(), *(v for v in where.values() if v is not None)]
    params = [_prep(f, v) for f, v in zip(fields, given, strict=True)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def insert(model: type[Model], values: dict[str, Any]) -> None:
    """``INSERT`` one row of ``model``: ``values`` and, for every other column, its field's
    default (as ``Model.save`` would; an auto primary key is left to the database)."""
    row = {**_defaults(model), **values}
    sql, fields = _insert_sql(model, tuple(row), connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql, [_prep(f, v) for f, v in zip(fields, row.values(), strict=True)])


def select(model: type[Model], columns: tuple[str, ...], **where: Any) -> tuple[Any, ...] | None:
    """The first row's ``columns`` (raw database values) of ``model`` matching ``where``."""
    keys = tuple(where)
    sql, fields = _select_sql(model, columns, keys, connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql, [_prep(f, v) for f, v in zip(fields, where.values(), strict=True)])
        row = cursor.fetchone()
    return tuple(row) if row is not None else None


def _prep(field: Field[Any, Any], value: Any) -> Any:
    return field.get_db_prep_save(value, connection)


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
    model: type[Model], names: tuple[str, ...], vendor: str
) -> tuple[str, list[Field[Any, Any]]]:
    columns = ", ".join(_column(model, n) for n in names)
    marks = ", ".join("%s" for _ in names)
    fields = [_field(model, n) for n in names]
    return f"INSERT INTO {_table(model)} ({columns}) VALUES ({marks})", fields


@cache
def _select_sql(
    model: type[Model], columns: tuple[str, ...], keys: tuple[str, ...], vendor: str
) -> tuple[str, list[Field[Any, Any]]]:
    wanted = ", ".join(_column(model, c) for c in columns)
    conditions = " AND ".join(f"{_column(model, k)} = %s" for k in keys)
    fields = [_field(model, k) for k in keys]
    return f"SELECT {wanted} FROM {_table(model)} WHERE {conditions} LIMIT 1", fields


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
