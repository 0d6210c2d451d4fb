"""A snapshot's whole transaction on a pooled connection of the driver, in two round trips.

The session path sends each statement on its own through SQLAlchemy's async adaptation, whose
CPU per statement is more than PostgreSQL spends on a snapshot's small statements. Here the
driver's pipeline carries BEGIN, the node's lock (or its insert, for a new node) and the
stream's read in one round trip, then the statement that closes the snapshot and COMMIT in the
second. What to close with is decided between the two, from the node and the rows read, by the
caller's `close`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from devicedeck.inventory.events import EventLog
from devicedeck.inventory.write.node_lock import (
    LOCK_TOUCH_OR_INSERT_NODE_SQL,
    LockedNode,
    plainly_locked_node,
)
from devicedeck.inventory.write.unchanged import UNCHANGED_CONNECTION_WAIT

# A statement as the driver takes it: SQL with %(name)s placeholders, and its values.
DriverCall = tuple[str, dict[str, Any]]
# The rows a read answered.
ReadRows = list[Sequence[Any]]


async def apply_on_locked_node(
    pool: AsyncConnectionPool[AsyncConnection[Any]],
    node_name: str,
    log: EventLog,
    read: DriverCall,
    close: Callable[[LockedNode, ReadRows], DriverCall | None],
    *,
    stale_after: timedelta | None,
    prepare_read: bool | None = None,
) -> bool:
    """BEGIN, the node's lock (or its insert, its node_added event then logged in `log`) and
    `read` (sent together; the read runs after the lock, so under it), then the statement
    `close` makes of the node and the read's rows, and COMMIT; None from `close` (a snapshot
    that needs more than one closing statement) rolls back, for the session path to apply it.
    `prepare_read=False` has the server plan the statements before `close` for each call,
    where a plan it would cache could outlive the table sizes it was made for.

    False, having changed nothing, when the node is one the session path must lock (another
    transaction is inserting it, or it is back from an outage), when `close` returned
    None, when no connection came in time, or when the server dropped the
    connection. Any other error of `close` or of a statement rolls the transaction back and
    propagates."""
    now: datetime = log.at
    locking = LOCK_TOUCH_OR_INSERT_NODE_SQL.values({"node_name": node_name, "now": now})
    try:
        async with pool.connection(timeout=UNCHANGED_CONNECTION_WAIT) as connection:
            try:
                # Not psycopg's transaction(): in a pipeline it waits for the server on entry
                # and on exit, two round trips more.
                async with connection.pipeline():
                    await connection.execute("BEGIN")
                    locked = await connection.execute(
                        LOCK_TOUCH_OR_INSERT_NODE_SQL.sql, locking, prepare=prepare_read
                    )
                    reading = await connection.execute(*read, prepare=prepare_read)
                    node_rows, rows = await locked.fetchall(), await reading.fetchall()
                    node = plainly_locked_node(node_rows, node_name, now, log, stale_after)
                    closing = None if node is None else close(node, rows)
                    if closing is None:
                        return False  # rolled back below
                    await connection.execute(*closing)
                    await connection.execute("COMMIT")
            finally:
                if connection.info.transaction_status != TransactionStatus.IDLE:
                    await connection.rollback()
    except psycopg.OperationalError:
        return False
    return True
