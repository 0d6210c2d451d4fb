"""Keyset pagination: opaque cursors holding the sort key of the last row of a page."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Select,
    and_,
    any_,
    func,
    literal,
    or_,
    select,
    tuple_,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import QueryableAttribute, Session

from devicedeck.inventory.errors import InvalidInput, Problem

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
# Keys are BIGINT columns; a cursor holding more would fail in the database, not here.
MAX_KEY = 2**63 - 1


@dataclass
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None
    count: int | None
    # False when count is an estimate (see bounded_count).
    count_exact: bool = True


def encode_cursor(sort: str, values: list[Any]) -> str:
    raw = json.dumps({"s": sort, "v": values}, separators=(",", ":"), default=str)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, sort: str, size: int) -> list[Any]:
    """The key values in a cursor made for the same sort, or InvalidInput naming the field."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        values = data["v"]
        valid = data["s"] == sort and isinstance(values, list) and len(values) == size
        # A forged cursor could carry text the database cannot take (a lone surrogate).
        for value in values if valid else []:
            if isinstance(value, str):
                value.encode("utf-8")
    except (ValueError, KeyError, TypeError, binascii.Error) as e:
        raise bad_cursor("is not a cursor this API made") from e
    if not valid:
        raise bad_cursor("was made for another sort order; start again without a cursor")
    return list(values)


def bad_cursor(why: str) -> InvalidInput:
    return InvalidInput(f"cursor {why}", [Problem("cursor", "cursor", why)])


Column = ColumnElement[Any] | QueryableAttribute[Any]


def after_key(
    columns: Sequence[Column], values: list[Any], descending: bool
) -> ColumnElement[bool]:
    """Rows strictly after the cursor's key in the page order (all columns one direction)."""
    left = tuple_(*columns)
    right = tuple_(*(_bind(column, value) for column, value in zip(columns, values, strict=True)))
    return left < right if descending else left > right


def after_newest_first(
    time_column: Column, name_columns: Sequence[Column], values: list[Any]
) -> ColumnElement[bool]:
    """Rows strictly after the cursor's key in an order of newest time first, then names
    ascending (the cursor holds the time, then the names)."""
    moment = _bind(time_column, values[0])
    names = tuple_(*name_columns)
    after = tuple_(
        *(_bind(column, value) for column, value in zip(name_columns, values[1:], strict=True))
    )
    return or_(time_column < moment, and_(time_column == moment, names > after))


def _bind(column: Column, value: Any) -> ColumnElement[Any]:
    """The cursor's value for a column, checked against the column's type: a cursor comes
    from the client, so a forged one must be a 422 and never reach the database."""
    kind = _python_type(column)
    if kind is datetime:
        value = _cursor_time(value)
    elif kind is int:
        if type(value) is not int or not -MAX_KEY <= value <= MAX_KEY:
            raise bad_cursor("holds a key this API did not write")
    elif type(value) is not str or "\x00" in value:
        raise bad_cursor("holds a key this API did not write")
    return literal(value, type_=column.type)


def _cursor_time(value: Any) -> datetime:
    try:
        if not isinstance(value, str):
            raise ValueError(value)
        parsed = datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            raise ValueError(value)
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError) as e:
        raise bad_cursor("holds a time this API did not write") from e


def _python_type(column: Column) -> type | None:
    try:
        return column.type.python_type
    except NotImplementedError:
        return None


def among(session: Session, column: Column, keys: list[int]) -> ColumnElement[bool]:
    """`column IN keys`, for the keys of a page's rows. On PostgreSQL one array parameter:
    psycopg parses a statement with hundreds of parameters anew each time (it caches only short
    ones), which cost more than running it."""
    if session.get_bind().dialect.name == "postgresql":
        return column == any_(literal(keys, ARRAY(BigInteger)))
    return column.in_(keys)


def check_limit(limit: int) -> int:
    if limit < 1 or limit > MAX_LIMIT:
        raise InvalidInput(
            f"limit must be between 1 and {MAX_LIMIT}",
            [Problem("limit", "range", f"must be between 1 and {MAX_LIMIT}")],
        )
    return limit


@dataclass(frozen=True)
class Keyset:
    """A page order: its name in cursors, and its key columns, all in one direction. The last
    column must make the key unique, so no row is skipped or repeated between pages."""

    sort: str
    columns: Sequence[Column]
    descending: bool = False

    def page_query(self, query: Select[Any], cursor: str | None, limit: int) -> Select[Any]:
        """The query from the cursor on, in this order, one row longer than the page: that
        row only tells whether another page follows."""
        check_limit(limit)
        if cursor:
            values = decode_cursor(cursor, self.sort, len(self.columns))
            query = query.where(after_key(self.columns, values, self.descending))
        order = [c.desc() for c in self.columns] if self.descending else self.columns
        return query.order_by(*order).limit(limit + 1)

    def cut(
        self, rows: Sequence[R], limit: int, key: Callable[[R], list[Any]]
    ) -> tuple[list[R], str | None]:
        """The page's rows, and the cursor of the next page (None on the last one); `key`
        gives a row's values of the key columns."""
        if len(rows) <= limit:
            return list(rows), None
        page = list(rows[:limit])
        return page, encode_cursor(self.sort, key(page[-1]))


# Counting every match of a broad filter costs as much as reading them all, and grows with the
# fleet; a count beyond this many is the planner's estimate instead (PostgreSQL).
EXACT_COUNT_LIMIT = 10_000


def bounded_count(
    session: Session, rows: Select[Any], limit: int = EXACT_COUNT_LIMIT, known: int | None = None
) -> tuple[int, bool]:
    """How many rows the query gives, and whether that is exact: exact up to `limit`, past it
    PostgreSQL's row estimate (SQLite, which has no estimate to give, counts them all).
    `known`, when given, is the exact number, known from elsewhere: it saves counting."""
    if known is not None and (known <= limit or session.get_bind().dialect.name != "postgresql"):
        return known, True
    if known is None:
        capped = session.scalar(select(func.count()).select_from(rows.limit(limit + 1).subquery()))
        if capped is not None and capped <= limit:
            return capped, True
    bind = session.get_bind()
    if bind.dialect.name != "postgresql":
        return int(session.scalar(select(func.count()).select_from(rows.subquery())) or 0), True
    # Expanding parameters (`IN (...)`) are rendered as one placeholder each: the statement is
    # sent as text, not through SQLAlchemy's execution, which would have expanded them.
    compiled = rows.compile(dialect=bind.dialect, compile_kwargs={"render_postcompile": True})
    plan = (
        session.connection()
        .exec_driver_sql(f"EXPLAIN (FORMAT JSON) {compiled}", compiled.params)
        .scalar_one()
    )
    estimate = int(plan[0]["Plan"]["Plan Rows"])
    # The estimate can fall below what was just counted; it is never less than that.
    return max(estimate, limit + 1), False
