"""Statements a changed snapshot runs on PostgreSQL, sent as the driver's own SQL.

SQLAlchemy's execution of a compiled statement (the compiled-cache lookup, the processing of
each parameter and of each result value) cost more CPU than PostgreSQL spends on the few
statements a changed snapshot sends. These are compiled once, for the async psycopg dialect the
event loop's sessions use, and run with `exec_driver_sql` in the session's transaction; errors
still come as SQLAlchemy's.

What the column types did is then the caller's: parameters are str, int, aware datetime, None,
or JSON (`JSON_TYPES` binds are wrapped for the driver); a time read back is in the
connection's time zone until `in_utc`.

JSON parameters travel as jsonb, serialised by pydantic-core (`jsonb`) at a fraction of the
standard library's CPU: PostgreSQL parses jsonb into its own form, so what is stored, and the
text a json column given it holds, does not depend on how the text was spaced or escaped.
Their keys are text and their values JSON types, which both serialise alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, overload

from psycopg.types.json import Jsonb
from pydantic_core import to_json
from sqlalchemy import JSON, BindParameter, CursorResult, Dialect
from sqlalchemy.dialects.postgresql.psycopg import PGDialectAsync_psycopg
from sqlalchemy.orm import Session
from sqlalchemy.sql.expression import ClauseElement
from sqlalchemy.types import UserDefinedType

_DIALECT = PGDialectAsync_psycopg()


def jsonb(value: Any) -> Jsonb:
    """`value` as a jsonb parameter of the driver."""
    return Jsonb(value, dumps=to_json)


class JsonbParameter(UserDefinedType[Any]):
    """The type of a jsonb bind parameter a statement sends through SQLAlchemy: PostgreSQL's
    JSONB, its value serialised as `jsonb` does."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "JSONB"

    def bind_processor(self, dialect: Dialect) -> Any:
        return jsonb


class DriverStatement:
    def __init__(self, statement: ClauseElement, binds: Iterable[BindParameter[Any]] = ()) -> None:
        compiled = statement.compile(dialect=_DIALECT)
        self.sql = str(compiled)
        # Values the statement itself binds (a NULL it writes, for example).
        self.defaults: dict[str, Any] = dict(compiled.params)
        self.json = frozenset(
            bind.key for bind in binds if isinstance(bind.type, JSON | JsonbParameter)
        )

    def execute(self, session: Session, parameters: dict[str, Any]) -> CursorResult[Any]:
        return session.connection().exec_driver_sql(self.sql, self.values(parameters))

    def values(self, parameters: dict[str, Any]) -> dict[str, Any]:
        """The parameters as the driver takes them, with `sql`, on a connection of its own."""
        values = {**self.defaults, **parameters}
        for key in self.json:
            values[key] = jsonb(values[key])
        return values


@overload
def in_utc(value: datetime) -> datetime: ...
@overload
def in_utc(value: None) -> None: ...
def in_utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)
