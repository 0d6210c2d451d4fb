"""Unchanged snapshots on PostgreSQL in the event loop: the snapshots that arrive while one
statement is in flight go together as the next statement, one row each.

At a few hundred unchanged snapshots a second, one statement each cost the service a round trip
of driver work per snapshot and the database a statement, a plan and a commit per snapshot, on
the cores the service shares with it. Grouping them costs nothing when snapshots come one at a
time: the first one goes at once, alone; only those that arrive while it is in flight wait, and
no longer than it takes. No timer holds a snapshot back.

Each row is checked as `record_unchanged_snapshot` checks one snapshot: the fresh node row
locked, the receipt advanced only if seq, boot and content hash say the snapshot is unchanged,
then the node touched. A row that does not apply has changed nothing, and its snapshot takes the
full path, as does every row of a statement that fails.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from devicedeck.inventory.models import IngestReceipt, Node, table_of
from devicedeck.inventory.write.receipts import ADVANCE_UNCHANGED_SQL, UnchangedCheck

_nodes = table_of(Node).name
_receipts = table_of(IngestReceipt).name

# The parameters of `unchanged_check`, each an array with one element per snapshot, and the
# type of its elements.
_COLUMNS = {
    "node_name": "varchar",
    "fresh_since": "timestamptz",
    "for_stream": "varchar",
    "for_boot": "varchar",
    "new_seq": "bigint",
    "same_hash": "varchar",
    "observed": "timestamptz",
    "now": "timestamptz",
}
# A node row another transaction holds is skipped, not waited for: its snapshots take the full
# path, which waits for it as it always did, while the other rows of the statement, and the
# snapshots queued behind it, go on. A node with two streams in one statement is touched once,
# with the later time; its receipts are two rows.
_ADVANCE_UNCHANGED_ROWS_SQL = f"""
WITH batch AS (
    SELECT * FROM unnest({", ".join(f"%({name})s::{kind}[]" for name, kind in _COLUMNS.items())})
    WITH ORDINALITY AS b({", ".join(_COLUMNS)}, row)
),
fresh_node AS (
    SELECT {_nodes}.id, batch.row FROM {_nodes} JOIN batch ON {_nodes}.name = batch.node_name
    WHERE {_nodes}.stale_since IS NULL AND {_nodes}.last_seen >= batch.fresh_since
    ORDER BY {_nodes}.id
    FOR UPDATE OF {_nodes} SKIP LOCKED
),
advanced_receipt AS (
    UPDATE {_receipts} SET
        seq = batch.new_seq,
        payload_hash = batch.same_hash,
        observed_at = batch.observed,
        received_at = batch.now
    FROM fresh_node JOIN batch ON batch.row = fresh_node.row
    WHERE {_receipts}.node_id = fresh_node.id
        AND {_receipts}.stream = batch.for_stream
        AND {_receipts}.boot_id = batch.for_boot
        AND {_receipts}.seq < batch.new_seq
        AND {_receipts}.content_hash = batch.same_hash
    RETURNING {_receipts}.node_id, batch.row, batch.now
),
touched_node AS (
    UPDATE {_nodes} SET last_seen = seen.now
    FROM (SELECT node_id, max(now) AS now FROM advanced_receipt GROUP BY node_id) AS seen
    WHERE {_nodes}.id = seen.node_id
)
SELECT row FROM advanced_receipt
"""

# How long an unchanged snapshot's statement waits for a pooled connection before its
# snapshots take the full path instead. A free connection normally comes within milliseconds;
# waiting longer means the database is down (the pool is still reconnecting) or the service is
# overloaded, and the full path reports either at once, as a 503.
UNCHANGED_CONNECTION_WAIT = 0.5


class _Lead:
    """What a queued snapshot's request is told when it is to send the next statement itself;
    otherwise it is told its snapshot's verdict."""


LEAD = _Lead()
Verdict = asyncio.Future[bool | None | _Lead]
Waiting = list[tuple[UnchangedCheck, Verdict]]


class UnchangedSnapshots:
    """`record_unchanged_snapshot` for PostgreSQL on a pool of autocommit connections, one
    statement in flight at a time, each its own transaction.

    The request whose snapshot finds no statement in flight sends it at once, itself; no task
    is started for it, at low load the common case. When its statement is done, it hands the
    snapshots queued meanwhile to the first of them, whose request sends them together."""

    def __init__(self, pool: AsyncConnectionPool[AsyncConnection[Any]]) -> None:
        self._pool = pool
        self._waiting: Waiting = []
        self._sending = False

    async def record(self, check: UnchangedCheck) -> bool | None:
        """True when the snapshot was recorded unchanged; False, having changed nothing, when
        it needs the full path. None when its statement could not run: no connection came in
        time, the server dropped the pooled connection (which the pool then discards), or
        refused the statement for now. A failed statement changed nothing, and the full path,
        which the caller takes next, meets the same trouble and reports it."""
        own: Verdict = asyncio.get_running_loop().create_future()
        self._waiting.append((check, own))
        if self._sending:
            try:
                told = await own
            except asyncio.CancelledError:
                if own.done() and not own.cancelled() and own.result() is LEAD:
                    self._hand_over()
                raise
            if not isinstance(told, _Lead):
                return told
        self._sending = True
        batch: Waiting = []
        try:
            batch, self._waiting = _one_per_stream(self._waiting)
            recorded = await self._send([check for check, _ in batch])
            mine: bool | None = None
            for row, (_, verdict) in enumerate(batch, start=1):
                verdict_of_row = None if recorded is None else row in recorded
                if verdict is own:
                    mine = verdict_of_row
                elif not verdict.done():
                    verdict.set_result(verdict_of_row)
            return mine
        except Exception as error:
            # A fault of the service's own, not the database's: each request reports it.
            for _, verdict in batch:
                if verdict is not own and not verdict.done():
                    verdict.set_exception(error)
            raise
        finally:
            # Cancelled (the service shutting down): the others take the full path.
            for _, verdict in batch:
                if verdict is not own and not verdict.done():
                    verdict.set_result(None)
            self._hand_over()

    def _hand_over(self) -> None:
        """The snapshots queued while a statement was in flight, to the first of them still
        waiting: its request sends the next statement."""
        while self._waiting:
            _, verdict = self._waiting[0]
            if not verdict.done():
                verdict.set_result(LEAD)
                return
            del self._waiting[0]  # its request was cancelled
        self._sending = False

    async def _send(self, checks: list[UnchangedCheck]) -> set[int] | None:
        """The rows (from 1, in the order of checks) recorded unchanged; None when the
        statement could not run."""
        try:
            async with self._pool.connection(timeout=UNCHANGED_CONNECTION_WAIT) as connection:
                if len(checks) == 1:
                    # Alone, as it goes at low load: the driver adapts arrays at a cost
                    # that is worth it only when they carry several snapshots.
                    cursor = await connection.execute(ADVANCE_UNCHANGED_SQL, checks[0])
                    return {1} if await cursor.fetchone() is not None else set()
                rows = {name: [check[name] for check in checks] for name in _COLUMNS}
                cursor = await connection.execute(_ADVANCE_UNCHANGED_ROWS_SQL, rows)
                return {row for (row,) in await cursor.fetchall()}
        except psycopg.OperationalError:  # PoolTimeout included
            return None


def _one_per_stream(waiting: Waiting) -> tuple[Waiting, Waiting]:
    """The first snapshot of each stream, and the rest, in the order they came: a stream's
    later snapshot waits for the next statement, where the ordering rules see the one before it
    recorded, as they would have one statement each. A snapshot whose request was cancelled is
    left out."""
    batch: Waiting = []
    later: Waiting = []
    streams: set[tuple[str, str]] = set()
    for waiter in waiting:
        if waiter[1].cancelled():
            continue
        stream = (waiter[0]["node_name"], waiter[0]["for_stream"])
        (later if stream in streams else batch).append(waiter)
        streams.add(stream)
    return batch, later
