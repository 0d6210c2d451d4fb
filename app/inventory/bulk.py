"""Many rows in one INSERT on PostgreSQL.

An executemany through psycopg sends a statement per row, each with its parameters to convert;
for the dozen-odd rows a snapshot writes, that costs more CPU than the database spends on them.
Here the rows travel as one JSON array instead, and PostgreSQL unpacks them with
jsonb_to_recordset. Values every row shares travel once, as ordinary bind parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import BindParameter, Table, bindparam
from sqlalchemy.dialects import postgresql

_DIALECT = postgresql.dialect()


def json_rows_insert_sql(table: Table, *, per_row: Sequence[str], shared: Sequence[str]) -> str:
    """An INSERT into `table` of the rows in the JSON parameter `:rows`: objects holding the
    `per_row` columns (a missing key is NULL), with each `shared` column set from the bind
    parameter of the same name. Values in the JSON must be JSON types: text, numbers, objects."""
    record = ", ".join(f"{name} {table.c[name].type.compile(_DIALECT)}" for name in per_row)
    return (
        f"INSERT INTO {table.name} ({', '.join([*shared, *per_row])}) "
        f"SELECT {', '.join([*(f':{name}' for name in shared), *(f'r.{n}' for n in per_row)])} "
        f"FROM jsonb_to_recordset(:rows) AS r({record})"
    )


def json_rows_binds(table: Table, shared: Sequence[str]) -> list[BindParameter[Any]]:
    """Bind parameters typed as their columns, so that times go through the column's type."""
    return [
        *(bindparam(name, type_=table.c[name].type) for name in shared),
        bindparam("rows", type_=postgresql.JSONB),
    ]


def json_rows(rows: Sequence[dict[str, Any]], per_row: Sequence[str]) -> list[dict[str, Any]]:
    """The `per_row` values of each row, None left out (it arrives as NULL)."""
    return [{key: row[key] for key in per_row if row[key] is not None} for row in rows]
