"""A snapshot's whole transaction on a pooled connection of the driver, in two round trips.

The session path sends each statement on its own through SQLAlchemy's async adaptation, whose
CPU per statement is more than PostgreSQL spends on a snapshot's small statements. Here the
driver's pipeline carries BEGIN and the reads in one round trip, then the statement that
closes the snapshot and COMMIT in the second. What to close with is decided between the two,
from the rows read, by the caller's `close`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from app.inventory.unchanged import UNCHANGED_CONNECTION_WAIT

# A statement as the driver takes it: SQL with %(name)s placeholders, and its values.
DriverCall = tuple[str, dict[str, Any]]
# The rows each read answered, in the order of the reads.
ReadRows = list[list[Sequence[Any]]]


class FullPathNeeded(Exception):
    """Raised by a `close` for a snapshot that needs more than one closing statement: its
    transaction rolls back, and the session path applies it."""


async def apply_in_two_round_trips(
    pool: AsyncConnectionPool[AsyncConnection[Any]],
    reads: Sequence[DriverCall],
    close: Callable[[ReadRows], DriverCall],
    *,
    prepare_reads: bool | None = None,
) -> bool:
    """BEGIN and `reads` (sent together; each runs after the one before, so a read after a
    row lock runs under it), then the statement `close` makes of their rows, and COMMIT.
    `prepare_reads=False` has the server plan the reads for each call, where a plan it would
    cache could outlive the table sizes it was made for.

    False, having changed nothing, when `close` raised FullPathNeeded, when no connection
    came in time, or when the server dropped the connection. Any other error of `close` or
    of a statement rolls the transaction back and propagates."""
    try:
        async with pool.connection(timeout=UNCHANGED_CONNECTION_WAIT) as connection:
            try:
                # Not psycopg's transaction(): in a pipeline it waits for the server on entry
                # and on exit, two round trips more.
                async with connection.pipeline():
                    await connection.execute("BEGIN")
                    cursors = [
                        await connection.execute(sql, values, prepare=prepare_reads)
                        for sql, values in reads
                    ]
                    rows: ReadRows = [await cursor.fetchall() for cursor in cursors]
                    sql, values = close(rows)
                    await connection.execute(sql, values)
                    await connection.execute("COMMIT")
            finally:
                if connection.info.transaction_status != TransactionStatus.IDLE:
                    await connection.rollback()
    except (FullPathNeeded, psycopg.OperationalError):
        return False
    return True
