"""Many rows in one INSERT, or one UPDATE.

On PostgreSQL an executemany through psycopg sends a statement per row, each with its
parameters to convert; for the dozen-odd rows a snapshot writes, that costs more CPU than the
database spends on them. There the rows travel as one JSON array instead, which PostgreSQL
unpacks with jsonb_to_recordset, and values every row shares travel once, as ordinary bind
parameters. SQLite keeps the executemany, which its driver runs in C.

On PostgreSQL, writes of one transaction that do not depend on each other's rows can also go
as one statement (`write_together`): each round trip through the driver costs more CPU than
PostgreSQL spends on such a write.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import JSON, BigInteger, BindParameter, Row, Table, bindparam, insert, text, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from devicedeck.inventory.write.driver_sql import DriverStatement, JsonbParameter

_DIALECT = postgresql.dialect()


class BulkInsert:
    """Inserts rows into `table`. `shared` names the columns that hold the same value in every
    row; `per_row` the others, whose values must be JSON types (text, numbers, objects) or None.
    """

    def __init__(
        self,
        table: Table,
        *,
        shared: Sequence[str],
        per_row: Sequence[str],
    ) -> None:
        self.shared = tuple(shared)
        self.per_row = tuple(per_row)
        self._table = table
        self._executemany = insert(table)
        # Named after the table, so that writes to different tables can share a statement.
        self._rows = f"{table.name}_rows"
        self._json_insert = self._insert_sql({})
        self._computed_inserts: dict[tuple[tuple[tuple[str, str], ...], str], str] = {}
        # The shared parameters are typed as their columns, so that times go through the
        # column's type.
        self._binds = (
            *(bindparam(name, type_=table.c[name].type) for name in shared),
            bindparam(self._rows, type_=JsonbParameter()),
        )
        self._from_json = text(self._json_insert).bindparams(*self._binds)

    def execute(self, session: Session, rows: Sequence[dict[str, Any]]) -> None:
        """Insert `rows`, each a whole row; the shared values are read from the first."""
        if not rows:
            return
        if session.get_bind().dialect.name != "postgresql":
            session.execute(self._executemany, rows)
            return
        session.execute(self._from_json, self._json_parameters(rows))

    def _insert_sql(self, computed: dict[str, str], join: str = "") -> str:
        table = self._table
        record = ", ".join(
            f"{name} {table.c[name].type.compile(_DIALECT)}" for name in self.per_row
        )
        columns = ", ".join([*self.shared, *self.per_row])
        values = ", ".join(
            [
                *(f":{name}" for name in self.shared),
                *(computed.get(name, f"r.{name}") for name in self.per_row),
            ]
        )
        insert = f"INSERT INTO {table.name} ({columns}) SELECT {values}"
        rows = f"jsonb_to_recordset(:{self._rows})"
        if not join:
            return f"{insert} FROM {rows} AS r({record})"
        # A join may give its rows in any order: they are put back in the array's order, in
        # which the inserted rows take their ids.
        names = ", ".join(self.per_row)
        return (
            f"{insert} FROM ROWS FROM ({rows} AS ({record})) "
            f"WITH ORDINALITY AS r({names}, row_order) {join} ORDER BY r.row_order"
        )

    def write(
        self,
        rows: Sequence[dict[str, Any]],
        *,
        returning: str,
        computed: dict[str, str] | None = None,
        join: str = "",
    ) -> Write:
        """The PostgreSQL insert of `rows` (not empty) as a part of `write_together`'s
        statement, returning `returning` for a later part to read. `computed` gives some
        columns an SQL expression instead of the row's value, which is `r.<column>` in it;
        `join` joins `r` to another part's rows for those expressions. The rows keep their
        order all the same."""
        insert_sql = self._json_insert
        if computed or join:
            key = (tuple((computed or {}).items()), join)
            insert_sql = self._computed_inserts.get(key) or self._computed_inserts.setdefault(
                key, self._insert_sql(computed or {}, join)
            )
        return Write(
            f"{insert_sql} RETURNING {returning}",
            self._binds,
            self._json_parameters(rows),
        )

    def _json_parameters(self, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The PostgreSQL statement's parameters: the shared values, read from the first row,
        and the rows' own values as one JSON array."""
        # A key left out of a JSON row (a None value) arrives as NULL.
        json_rows = [
            {key: row[key] for key in self.per_row if row[key] is not None} for row in rows
        ]
        return {**{name: rows[0][name] for name in self.shared}, self._rows: json_rows}


class BulkInsertReturning(BulkInsert):
    """A BulkInsert that answers, for each row inserted, the `returning` columns (in no set
    order): for a caller that needs the ids the database gave."""

    def __init__(
        self,
        table: Table,
        *,
        shared: Sequence[str],
        per_row: Sequence[str],
        returning: Sequence[str],
    ) -> None:
        super().__init__(table, shared=shared, per_row=per_row)
        self._from_json = text(f"{self._json_insert} RETURNING {', '.join(returning)}").bindparams(
            *self._binds
        )
        self._executemany_returning = insert(table).returning(*(table.c[n] for n in returning))

    def execute_returning(
        self, session: Session, rows: Sequence[dict[str, Any]]
    ) -> Sequence[Row[Any]]:
        """Insert `rows` as `execute` does; the rows inserted, as `returning` names them."""
        if not rows:
            return []
        if session.get_bind().dialect.name != "postgresql":
            return session.execute(self._executemany_returning, rows).all()
        return session.execute(self._from_json, self._json_parameters(rows)).all()


class BulkUpdate:
    """Updates rows of `table` by their `id`. Each row gives its id and only the columns that
    change, which may differ from row to row; a column a row leaves out keeps its value.

    On PostgreSQL the rows travel as one JSON object keyed by id, so the update is one
    statement (and one run of the table's statement triggers) whatever the number of rows.
    The rows to change are found by `id = ANY(ids)`, an index lookup whatever the planner
    knows: joining the table to the JSON rows instead let a generic plan of the prepared
    statement scan the whole table. SQLite runs an executemany per set of columns."""

    def __init__(self, table: Table, *, columns: Sequence[str]) -> None:
        self.table = table
        self.columns = tuple(columns)
        row = f"(changes.rows -> {table.name}.id::text)"
        settings = []
        for name in self.columns:
            column = table.c[name]
            sql_type = column.type.compile(_DIALECT)
            # Text out of the JSON for every type but JSON, which stays JSON.
            value = f"{row} -> '{name}'" if isinstance(column.type, JSON) else f"{row} ->> '{name}'"
            settings.append(
                f"{name} = CASE WHEN {row} ? '{name}' THEN ({value})::{sql_type} "
                f"ELSE {table.name}.{name} END"
            )
        # Named after the table, so that writes to different tables can share a statement.
        self._rows, self._ids = f"{table.name}_changes", f"{table.name}_ids"
        self._update = (
            f"WITH changes AS (SELECT CAST(:{self._rows} AS jsonb) AS rows) "
            f"UPDATE {table.name} SET {', '.join(settings)} FROM changes "
            f"WHERE {table.name}.id = ANY(:{self._ids})"
        )
        self._binds = (
            bindparam(self._rows, type_=JsonbParameter()),
            bindparam(self._ids, type_=postgresql.ARRAY(BigInteger)),
        )
        self._from_json = text(self._update).bindparams(*self._binds)
        self._by_columns: dict[tuple[str, ...], Any] = {}

    def execute(self, session: Session, rows: Sequence[dict[str, Any]]) -> None:
        """Apply `rows`, each {"id": ..., column: new value, ...}."""
        if not rows:
            return
        if session.get_bind().dialect.name == "postgresql":
            session.execute(self._from_json, self._json_parameters(rows))
            return
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for row in rows:
            columns = tuple(sorted(key for key in row if key != "id"))
            groups.setdefault(columns, []).append({f"to_{k}": v for k, v in row.items()})
        for columns, group in groups.items():
            session.execute(self._statement(columns), group)

    def write(self, rows: Sequence[dict[str, Any]]) -> Write:
        """The PostgreSQL update of `rows` (not empty) as a part of `write_together`'s
        statement."""
        return Write(self._update, self._binds, self._json_parameters(rows))

    def _json_parameters(self, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        by_id = {
            str(row["id"]): {
                key: value.isoformat() if isinstance(value, datetime) else value
                for key, value in row.items()
                if key != "id"
            }
            for row in rows
        }
        return {self._rows: by_id, self._ids: [row["id"] for row in rows]}

    def _statement(self, columns: tuple[str, ...]) -> Any:
        statement = self._by_columns.get(columns)
        if statement is None:
            table = self.table
            statement = (
                update(table)
                .where(table.c.id == bindparam("to_id"))
                .values(
                    {name: bindparam(f"to_{name}", type_=table.c[name].type) for name in columns}
                )
            )
            self._by_columns[columns] = statement
        return statement


class Write(NamedTuple):
    """One INSERT or UPDATE, a part of `write_together`'s statement: its SQL with :name
    parameters, the parameters that need a type (times, JSON), and the values of all.
    `name`: the part's name, for a later part to read the rows it returns."""

    sql: str
    binds: tuple[BindParameter[Any], ...]
    parameters: dict[str, Any]
    name: str | None = None


_together: dict[tuple[str | None, ...], DriverStatement] = {}


def write_together(session: Session, writes: Sequence[Write]) -> None:
    """PostgreSQL: the writes as one statement, in their order, each a data-modifying CTE.
    They all see the rows as the statement found them, and none sees another's changes: only
    writes that do not read each other's rows go together, but a part may read the rows an
    earlier, named, part returns. Triggers run at the end of the
    statement, as they would at the end of each write."""
    statement, parameters = together(writes)
    statement.execute(session, parameters)


def together(writes: Sequence[Write]) -> tuple[DriverStatement, dict[str, Any]]:
    """`write_together`'s statement and its parameters, for a caller that sends it itself."""
    shape = tuple(part for write in writes for part in (write.sql, write.name))
    statement = _together.get(shape)
    if statement is None:
        statement = _together[shape] = _statement_of(writes)
    parameters: dict[str, Any] = {}
    for write in writes:
        parameters.update(write.parameters)
    return statement, parameters


def _statement_of(writes: Sequence[Write]) -> DriverStatement:
    names = [write.name or f"w{index}" for index, write in enumerate(writes)]
    ctes = ", ".join(f"{name} AS ({write.sql})" for name, write in zip(names, writes, strict=True))
    binds = {bind.key: bind for write in writes for bind in write.binds}
    assert len(binds) == sum(len(write.binds) for write in writes), "parameter names clash"
    statement = text(f"WITH {ctes} SELECT 1").bindparams(*binds.values())
    return DriverStatement(statement, binds.values())
