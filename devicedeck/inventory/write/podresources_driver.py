"""A changed PodResources snapshot's whole transaction on a pooled connection of the driver, in
two round trips (`apply_on_locked_node`, devicedeck/inventory/write/driver_transaction.py): BEGIN,
the node's lock (or, for a node not known yet, the insert of its row) and the read of the stream's
receipt and the node's holdings; then the one statement that writes the allocation changes,
the allocatable sets, the devices first named here, the receipt and the events, and COMMIT.

The session path (`apply_snapshot`, inventory/write/ingest.py) sends the same statements one at a
time through SQLAlchemy's async adaptation, whose CPU per statement was a large part of a new
node's first snapshot. The decisions are the same, taken by the same domain functions. A
snapshot that needs more than that statement can carry goes there instead, before anything is
written: DRA claims (listed, or open on the node), a node back from an outage, a repeat.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from devicedeck.inventory.events import EventLog
from devicedeck.inventory.schemas import PodResourcesSnapshot
from devicedeck.inventory.write.allocations import PodsListed, pods_listed
from devicedeck.inventory.write.allocations_postgresql import (
    READ_RECEIPT_AND_HOLDINGS_OF_NAMED_NODE,
    new_devices_part,
    receipt_and_holdings_of,
    receipt_and_holdings_parameters,
    writes_replacing_holdings,
)
from devicedeck.inventory.write.bulk import Write, together
from devicedeck.inventory.write.decision import Plan, plan_snapshot
from devicedeck.inventory.write.driver_sql import DriverStatement
from devicedeck.inventory.write.driver_transaction import (
    DriverCall,
    ReadRows,
    apply_on_locked_node,
)
from devicedeck.inventory.write.node_lock import LockedNode
from devicedeck.inventory.write.receipts import (
    PODRESOURCES_STREAM,
    ReceiptRecord,
    receipt_write,
)


async def apply_pod_resources(
    pool: AsyncConnectionPool[AsyncConnection[Any]],
    snapshot: PodResourcesSnapshot,
    *,
    content_hash: str,
    actor: str,
    now: datetime,
    max_node_devices: int | None = None,
    stale_after: timedelta | None = None,
) -> EventLog | None:
    """`apply_snapshot` on PostgreSQL for a PodResources snapshot without DRA claims: its
    events, as written.

    None, having changed nothing, for a snapshot the session path must apply, or when no
    connection came in time or the server dropped it. A snapshot the ordering rules refuse,
    or over the node's device limit, raises, as on the session path."""
    listed = pods_listed(snapshot)
    parameters = {
        "node_name": snapshot.node,
        "now": now,
        **receipt_and_holdings_parameters(PODRESOURCES_STREAM, content_hash, listed),
    }
    log = EventLog(at=now, actor=actor)
    read = (READ_RECEIPT_AND_HOLDINGS_OF_NAMED_NODE, parameters)

    def close(node: LockedNode, rows: ReadRows) -> DriverCall | None:
        closing = _pod_resources_close(
            snapshot, listed, node, rows[0], content_hash, log, max_node_devices
        )
        if closing is None:
            return None
        statement, values = closing
        return statement.sql, statement.values(values)

    if not await apply_on_locked_node(
        pool, snapshot.node, log, read, close, stale_after=stale_after
    ):
        return None
    return log


def _pod_resources_close(
    snapshot: PodResourcesSnapshot,
    listed: PodsListed,
    node: LockedNode,
    read: Sequence[Any],
    content_hash: str,
    log: EventLog,
    max_node_devices: int | None,
) -> tuple[DriverStatement, dict[str, Any]] | None:
    """`apply_pod_resources`' decisions, as `apply_snapshot` takes them, from the node's row
    (locked, or inserted) and the receipt-and-holdings read: the statement that closes the
    transaction."""
    now = log.at
    receipt, holdings = receipt_and_holdings_of(read, listed.resources)
    plan = plan_snapshot(receipt, snapshot, stream=PODRESOURCES_STREAM, content_hash=content_hash)
    if plan in (Plan.ANSWER_REPEAT, Plan.ANSWER_LATE):
        return None  # answered there, with the node's events
    writes: list[Write] = []
    if plan is Plan.APPLY_CHANGES:
        # The read brings the holdings whenever the receipt's content is not this one.
        if holdings is None or holdings.claims_open or _lists_claims(snapshot):
            return None  # the claims are read and written statement by statement
        writes = writes_replacing_holdings(
            node.id, snapshot.node, listed, holdings, now, log, max_node_devices=max_node_devices
        )
    record = ReceiptRecord(
        node.id, PODRESOURCES_STREAM, snapshot.source, content_hash, snapshot.observed_at, now
    )
    writes.append(receipt_write(receipt, record))
    return together(log.written_after(writes, new_devices=new_devices_part(writes)))


def _lists_claims(snapshot: PodResourcesSnapshot) -> bool:
    return any(
        container.dynamic_resources
        for pod in snapshot.pod_resources
        for container in pod.containers
    )
