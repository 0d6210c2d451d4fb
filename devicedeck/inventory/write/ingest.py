"""Applying snapshots from node agents: which route a snapshot takes, each carrying out the
plan its stream's receipt gives it (`plan_snapshot`, devicedeck/inventory/write/decision.py).

Each snapshot replaces what its stream owns, in one transaction, with its events: a
ListAndWatch snapshot the device list of one (node, resource)
(inventory/write/device_lists.py), a PodResources snapshot the node's current allocations
(inventory/write/allocations.py), its DRA claims (devicedeck/inventory/write/claims.py) and its
allocatable sets. The stream's receipt (devicedeck/inventory/write/receipts.py) orders snapshots
and remembers the hash of the content applied.

`SnapshotIngest` takes a snapshot from the route: it checks the snapshot's size, hashes its
content, asks the recent-content hint whether the one-statement unchanged check is worth
trying, and otherwise (or when that check does not apply) applies the snapshot in full, in the
event loop where the database and the body's size allow, else in a worker thread. A changed
device list, the common health flip as much as a new node's first, is applied in the event
loop on the driver's own connection in two round trips (`apply_listed_devices`) when it needs
nothing more; so is a changed PodResources snapshot without DRA claims, a new node's first one
too (`apply_pod_resources`, devicedeck/inventory/write/podresources_driver.py). Before all that,
the route may offer a body that repeats, but for its place in the stream, the one last stored for
the stream (`record_repeat`): only the statement runs for it.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import anyio.to_thread
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.db import EventLoopDatabase, write_session
from devicedeck.inventory.events import EventLog
from devicedeck.inventory.notifications.alerts import outbox_of
from devicedeck.inventory.schemas import (
    ListAndWatchPlace,
    ListAndWatchSnapshot,
    Placed,
    PodResourcesSnapshot,
    SnapshotPlace,
    check_snapshot_size,
)
from devicedeck.inventory.write.allocations import (
    NodeHoldings,
    PodsListed,
    log_allocation_changes,
    on_postgresql,
    pods_listed,
    read_holdings,
    replace_allocatable,
    write_allocation_changes,
)
from devicedeck.inventory.write.allocations_postgresql import (
    new_devices_part,
    read_receipt_and_holdings,
    writes_replacing_holdings,
)
from devicedeck.inventory.write.bulk import Write, together
from devicedeck.inventory.write.claims import replace_claim_allocations
from devicedeck.inventory.write.decision import Plan, plan_snapshot
from devicedeck.inventory.write.derived_health import DERIVED
from devicedeck.inventory.write.device_lists import (
    NEW_LISTED_DEVICES,
    STREAM_OF_NAMED_NODE,
    DeviceChanges,
    ListedDevice,
    check_listed_devices_fit,
    device_changes_write,
    listed_device_changes,
    new_devices_write,
    present_elsewhere_of_rows,
    read_stream,
    record_plugin,
    replace_device_list,
    stream_of_rows,
    stream_parameters,
    write_device_changes,
)
from devicedeck.inventory.write.driver_sql import DriverStatement
from devicedeck.inventory.write.driver_transaction import (
    DriverCall,
    ReadRows,
    apply_on_locked_node,
)
from devicedeck.inventory.write.node_lock import LockedNode, lock_node_seen
from devicedeck.inventory.write.podresources_driver import apply_pod_resources
from devicedeck.inventory.write.receipts import (
    PODRESOURCES_STREAM,
    ReceiptRecord,
    StreamReceipt,
    find_receipt,
    listandwatch_stream,
    receipt_write,
    record_receipt,
    record_unchanged_snapshot,
    unchanged_check,
)
from devicedeck.inventory.write.unchanged import UnchangedSnapshots

Snapshot = ListAndWatchSnapshot | PodResourcesSnapshot


@dataclass
class IngestResult:
    """What a snapshot changed. `duplicate` marks a repeat of the last seq, `late` a snapshot of
    a boot older than the stream's (nothing applied for either)."""

    changed: bool = False
    duplicate: bool = False
    late: bool = False
    added: int = 0
    removed: int = 0
    reappeared: int = 0
    health_changes: int = 0
    allocated: int = 0
    released: int = 0
    events: int = 0


def stream_of(snapshot: Snapshot | SnapshotPlace) -> str:
    """The receipt stream a snapshot belongs to: one per (node, resource) for ListAndWatch,
    one per node for PodResources."""
    if isinstance(snapshot, ListAndWatchSnapshot | ListAndWatchPlace):
        return listandwatch_stream(snapshot.resource)
    return PODRESOURCES_STREAM


def _replace_device_list(
    session: Session,
    node_id: int,
    snapshot: ListAndWatchSnapshot,
    now: datetime,
    log: EventLog,
    max_node_devices: int | None,
    *,
    new_node: bool,
    listed: dict[str, ListedDevice],
    after_gap: bool,
) -> DeviceChanges:
    changes = replace_device_list(
        session,
        node_id,
        snapshot,
        now,
        log,
        max_node_devices=max_node_devices,
        new_node=new_node,
        listed=listed,
        after_gap=after_gap,
    )
    if snapshot.plugin is not None:
        record_plugin(session, node_id, snapshot, now, log, new_node=new_node)
    return changes


def _replace_allocations(
    session: Session,
    node_id: int,
    snapshot: PodResourcesSnapshot,
    now: datetime,
    log: EventLog,
    max_node_devices: int | None,
    listed: PodsListed | None,
    holdings: NodeHoldings | None,
) -> list[Write]:
    """On PostgreSQL, where the holdings were read with the receipt, the changes are written
    by the statement that closes the snapshot: its parts, returned. On SQLite the holdings are
    read and the changes written here, and none is returned."""
    writes: list[Write] = []
    if listed is not None and holdings is not None:
        writes = writes_replacing_holdings(
            node_id, snapshot.node, listed, holdings, now, log, max_node_devices=max_node_devices
        )
    else:
        listed = pods_listed(snapshot)
        holdings = read_holdings(session, node_id, listed.resources, listed.pods_holding())
        changes = listed.changes(node_id, holdings, now, max_node_devices=max_node_devices)
        created = write_allocation_changes(session, node_id, changes, now)
        if listed.allocatable is not None:
            replace_allocatable(session, node_id, listed.allocatable, now)
        log_allocation_changes(changes, snapshot.node, {**holdings.devices, **created}, log)
    replace_claim_allocations(
        session, node_id, snapshot, now, log, claims_open=holdings.claims_open
    )
    return writes


def apply_snapshot(
    session: Session,
    snapshot: Snapshot,
    *,
    now: datetime,
    actor: str,
    content_hash: str | None = None,
    try_unchanged_first: bool = True,
    max_node_devices: int | None = None,
    stale_after: timedelta | None = None,
    first_since_start: bool = False,
) -> IngestResult:
    """The ordering and idempotency rules every stream shares; what the stream owns (a device
    list, or a node's allocations) is replaced only when the content differs from the last
    applied. `first_since_start`: the first snapshot of its stream this process takes.

    The unchanged-snapshot statement first is only a shortcut: skipped when the content is
    likely changed, or the statement has just run on its own; the full path below still finds
    an unchanged snapshot unchanged."""
    stream = stream_of(snapshot)
    content_hash = content_hash or snapshot.content_hash()
    if try_unchanged_first:
        check = unchanged_check(
            snapshot, stream=stream, content_hash=content_hash, now=now, stale_after=stale_after
        )
        if record_unchanged_snapshot(session, check):
            return IngestResult()
    log = EventLog(at=now, actor=actor)
    node = lock_node_seen(session, snapshot.node, now, log, stale_after)
    node_id = node.id
    # A node this transaction created has no receipt, and no devices, to look for. A
    # ListAndWatch stream's receipt comes with its devices, which a changed snapshot needs.
    listed: dict[str, ListedDevice] = {}
    pods: PodsListed | None = None
    holdings: NodeHoldings | None = None
    if isinstance(snapshot, PodResourcesSnapshot) and on_postgresql(session):
        # The receipt comes with the holdings a changed snapshot replaces.
        pods = pods_listed(snapshot)
        receipt, holdings = read_receipt_and_holdings(session, node_id, stream, content_hash, pods)
    elif node.new:
        receipt = None
    elif isinstance(snapshot, ListAndWatchSnapshot):
        receipt, listed = read_stream(session, node_id, snapshot)
    else:
        receipt = find_receipt(session, node_id, stream)
    plan = plan_snapshot(receipt, snapshot, stream=stream, content_hash=content_hash)
    if plan is Plan.ANSWER_REPEAT:
        log.write(session)
        return IngestResult(duplicate=True, changed=bool(log.rows), events=len(log.rows))
    if plan is Plan.ANSWER_LATE:
        log.write(session)  # the node's own events: it was seen
        return IngestResult(late=True, changed=bool(log.rows), events=len(log.rows))
    device_changes: DeviceChanges = []
    allocation_writes: list[Write] = []
    if plan is Plan.APPLY_CHANGES:
        if isinstance(snapshot, ListAndWatchSnapshot):
            device_changes = _replace_device_list(
                session,
                node_id,
                snapshot,
                now,
                log,
                max_node_devices,
                new_node=node.new,
                listed=listed,
                # What the agent saw while it was away or the service was down reaches the
                # service as one snapshot.
                after_gap=first_since_start
                or (receipt is not None and receipt.boot_id != snapshot.source.boot_id),
            )
        else:
            allocation_writes = _replace_allocations(
                session, node_id, snapshot, now, log, max_node_devices, pods, holdings
            )
    record = ReceiptRecord(
        node_id, stream, snapshot.source, content_hash, snapshot.observed_at, now
    )
    if session.get_bind().dialect.name == "postgresql":
        # The closing writes read none of each other's rows but the devices a PodResources
        # snapshot creates: one statement, one round trip.
        writes = _closing_writes(device_changes, allocation_writes, receipt, record)
        log.write_with(session, writes, new_devices=new_devices_part(allocation_writes))
    else:
        write_device_changes(session, device_changes)
        record_receipt(session, receipt, record)
        log.write(session)
    return _result_of(log)


def _closing_writes(
    device_changes: DeviceChanges,
    allocation_writes: list[Write],
    receipt: StreamReceipt | None,
    record: ReceiptRecord,
) -> list[Write]:
    """On PostgreSQL, the writes that close a changed snapshot's transaction but for its
    events: the device changes, if any, the allocations', and the receipt."""
    writes = [device_changes_write(device_changes)] if device_changes else []
    writes += allocation_writes
    writes.append(receipt_write(receipt, record))
    return writes


def _result_of(log: EventLog) -> IngestResult:
    """What an applied snapshot changed, told by its events."""
    return IngestResult(
        changed=bool(log.rows),
        added=log.count("device_added"),
        removed=log.count("device_removed"),
        reappeared=log.count("device_reappeared"),
        health_changes=log.count("health_changed"),
        allocated=log.count("allocated") + log.count("claim_allocated"),
        released=log.count("released") + log.count("claim_released"),
        events=len(log.rows),
    )


async def apply_listed_devices(
    pool: AsyncConnectionPool[AsyncConnection[Any]],
    snapshot: ListAndWatchSnapshot,
    *,
    content_hash: str,
    actor: str,
    now: datetime,
    stale_after: timedelta | None = None,
    max_node_devices: int | None = None,
    stored: bool = True,
) -> EventLog | None:
    """`apply_snapshot` on PostgreSQL for a ListAndWatch snapshot without a registration or a
    derived health, from a node not back from an outage: a health flip, a new device, a new
    stream, a new node's first snapshot; its events, as written. Sent on a pooled connection of
    the driver in two round trips (`apply_on_locked_node`): BEGIN, the node's lock (or its
    insert, for a new node) and the stream's read; then one statement with the new devices,
    the other device changes, the receipt and the events, and COMMIT. The full path sends each
    on its own, through SQLAlchemy's async adaptation, which cost about two thirds of such a
    snapshot's CPU.

    None, having changed nothing, for any other snapshot, or when no connection came in time
    or the server dropped it: the full path then applies it. A snapshot the ordering rules or
    the per-node device limit refuse raises, as on the full path. `stored`: this process
    stored the stream's last snapshot (`RecentContent.has_stored`)."""
    parameters = {**stream_parameters(snapshot), "node_name": snapshot.node, "now": now}
    log = EventLog(at=now, actor=actor)
    read = (STREAM_OF_NAMED_NODE.sql, STREAM_OF_NAMED_NODE.values(parameters))

    def close(node: LockedNode, rows: ReadRows) -> DriverCall | None:
        closing = _listed_devices_close(snapshot, node, rows, content_hash, log, max_node_devices)
        if closing is None:
            return None
        statement, values = closing
        return statement.sql, statement.values(values)

    # A stream this process has not stored (a new node's, most often) has its reads planned
    # for the snapshot: prepared, the server kept a plan made while the tables were small
    # until their next ANALYZE, and a new node's first round trip went from 3 to 33 ms over
    # 2,000 new nodes without autovacuum. A flip's reads stay prepared: planning them each
    # time cost the database more than they did.
    applied = await apply_on_locked_node(
        pool,
        snapshot.node,
        log,
        read,
        close,
        stale_after=stale_after,
        prepare_read=None if stored else False,
    )
    return log if applied else None


def _listed_devices_close(
    snapshot: ListAndWatchSnapshot,
    node: LockedNode,
    rows: Sequence[Sequence[Any]],
    content_hash: str,
    log: EventLog,
    max_node_devices: int | None,
) -> tuple[DriverStatement, dict[str, Any]] | None:
    """`apply_listed_devices`' decisions, as `apply_snapshot` takes them, from the node's
    locked (or inserted) row and the stream's rows: the statement that closes the
    transaction."""
    now = log.at
    stream = listandwatch_stream(snapshot.resource)
    receipt, listed = stream_of_rows(rows)
    plan = plan_snapshot(receipt, snapshot, stream=stream, content_hash=content_hash)
    if plan in (Plan.ANSWER_REPEAT, Plan.ANSWER_LATE):
        return None  # answered there, with the node's events
    device_changes: DeviceChanges = []
    inserted: list[Write] = []
    if plan is Plan.APPLY_CHANGES:
        device_changes, new_devices = listed_device_changes(
            node.id, snapshot, now, log, listed, gone=set()
        )
        if new_devices:
            elsewhere = 0 if node.new else present_elsewhere_of_rows(rows)
            check_listed_devices_fit(snapshot, elsewhere, max_node_devices)
            inserted.append(new_devices_write(snapshot, new_devices, log))
    record = ReceiptRecord(
        node.id, stream, snapshot.source, content_hash, snapshot.observed_at, now
    )
    writes = inserted + _closing_writes(device_changes, [], receipt, record)
    return together(log.written_after(writes, new_devices=NEW_LISTED_DEVICES if inserted else None))


class RecentContent:
    """The content hash this process last stored for each stream: a hint of whether the next
    snapshot is likely unchanged, and so worth the one-statement check before the full path.
    A wrong hint (when another replica took the last snapshot) costs time, never correctness:
    the full path finds an unchanged snapshot unchanged by itself.

    With the hash, the digest of the body that stored it (`repeat_digest`), when the caller
    gave one: a body with the same digest is the same content, validated already.

    A stream this process has not stored yet (a new node's, or any after a restart) skips the
    check: for a new node it is a wasted round trip on every stream, while an unchanged stream
    pays the apply once, and is then known."""

    MAX_ENTRIES = 100_000

    def __init__(self) -> None:
        self._stored: dict[tuple[str, str], tuple[str, bytes | None]] = {}

    def may_be_unchanged(self, node: str, stream: str, content_hash: str) -> bool:
        """True only when this process last stored this content for the stream."""
        stored = self._stored.get((node, stream))
        return stored is not None and stored[0] == content_hash

    def has_stored(self, node: str, stream: str) -> bool:
        """True when this process stored a snapshot for the stream."""
        return (node, stream) in self._stored

    def content_of(self, node: str, stream: str, body_digest: bytes) -> str | None:
        """The content hash last stored for the stream, if it came with a body of this
        digest."""
        stored = self._stored.get((node, stream))
        return stored[0] if stored is not None and stored[1] == body_digest else None

    def remember(
        self, node: str, stream: str, content_hash: str, body_digest: bytes | None = None
    ) -> None:
        if len(self._stored) >= self.MAX_ENTRIES:
            self._stored.clear()
        self._stored[(node, stream)] = (content_hash, body_digest)


# Bodies up to this size are applied in the event loop on PostgreSQL: an ordinary node's
# snapshot is a few KiB. A larger one goes to a worker thread, so that applying it does not
# hold up every other request, /livez included, for its whole duration.
EVENT_LOOP_MAX_BODY = 32 * 1024

ApplySnapshot = Callable[..., IngestResult]


class SnapshotIngest:
    """Applies the snapshots node agents post, one service process's worth."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        event_loop_database: EventLoopDatabase | None,
        *,
        max_devices: int,
        max_pods: int,
        max_node_devices: int | None = None,
        stale_after: timedelta | None = None,
    ) -> None:
        self.factory = factory
        self.event_loop_database = event_loop_database
        self.max_devices = max_devices
        self.max_pods = max_pods
        self.max_node_devices = max_node_devices
        self.stale_after = stale_after
        self.recent = RecentContent()
        # Off, a changed snapshot takes the full path even where the driver's connection
        # would do: the full path's own results are what that route is checked against.
        self.drivers_connection = True
        self.unchanged = (
            None
            if event_loop_database is None
            else UnchangedSnapshots(event_loop_database.statements)
        )

    def may_know_repeat(self, node: object, stream: str | None) -> bool:
        """Whether a body naming `node` and `stream` may be a repeat `record_repeat` knows.
        Only a stream this process stored has one: for any other (a new node's) the body's
        place and its caller are not worth checking."""
        return isinstance(node, str) and stream is not None and self.recent.has_stored(node, stream)

    async def record_repeat(self, place: SnapshotPlace, body_digest: bytes) -> bool:
        """A snapshot whose body, but for its place, is the one this process last stored for
        the stream: recorded unchanged by the one statement with the content hash remembered
        for that body, neither validated nor hashed again.

        False, having changed nothing, when that does not apply: the hint knows another body,
        there is no database to run it on in the event loop, or the database finds the content
        or the place not those of an unchanged snapshot (another writer, an older seq, a stale
        node). The snapshot then takes `apply`."""
        unchanged = self.unchanged
        stream = stream_of(place)
        content_hash = self.recent.content_of(place.node, stream, body_digest)
        if content_hash is None or unchanged is None:
            return False
        return bool(await self._record_unchanged(unchanged, place, stream, content_hash))

    async def _record_unchanged(
        self, unchanged: UnchangedSnapshots, snapshot: Placed, stream: str, content_hash: str
    ) -> bool | None:
        """The unchanged-snapshot statement, outside any transaction; None when it could not
        run."""
        check = unchanged_check(
            snapshot,
            stream=stream,
            content_hash=content_hash,
            now=utcnow(),
            stale_after=self.stale_after,
        )
        return await unchanged.record(check)

    async def apply(
        self,
        snapshot: Snapshot,
        *,
        actor: str,
        body_bytes: int | None,
        body_digest: bytes | None = None,
    ) -> IngestResult:
        """Where the hint says the content may be unchanged, try the one-statement check
        first; then apply the snapshot in full. `body_digest` is the posted body's
        `repeat_digest`, for `record_repeat` to know the body again."""
        check_snapshot_size(snapshot, max_devices=self.max_devices, max_pods=self.max_pods)
        stream = stream_of(snapshot)
        content_hash = snapshot.content_hash()
        try_unchanged_first = self.recent.may_be_unchanged(snapshot.node, stream, content_hash)
        database = self.event_loop_database
        unchanged: bool | None = False
        if try_unchanged_first and self.unchanged is not None:
            unchanged = await self._record_unchanged(self.unchanged, snapshot, stream, content_hash)
            # None: it could not run on its own, and the full path's transaction tries it.
            try_unchanged_first = unchanged is None
        applied: IngestResult | None = None
        if unchanged:
            applied = IngestResult()
        elif database is not None and not try_unchanged_first and self.drivers_connection:
            applied = await self._apply_on_the_drivers_connection(
                database, snapshot, content_hash, actor, body_bytes
            )
        if applied is None:
            apply = functools.partial(
                apply_snapshot,
                snapshot=snapshot,
                actor=actor,
                content_hash=content_hash,
                try_unchanged_first=try_unchanged_first,
                max_node_devices=self.max_node_devices,
                stale_after=self.stale_after,
                first_since_start=not self.recent.has_stored(snapshot.node, stream),
            )
            applied = await self._apply_in_event_loop(apply, body_bytes)
            if applied is None:
                applied = await anyio.to_thread.run_sync(self._apply_in_thread, apply)
        self.recent.remember(snapshot.node, stream, content_hash, body_digest)
        return applied

    async def _apply_on_the_drivers_connection(
        self,
        database: EventLoopDatabase,
        snapshot: Snapshot,
        content_hash: str,
        actor: str,
        body_bytes: int | None,
    ) -> IngestResult | None:
        """A changed snapshot in two round trips on a pooled connection of the driver, where
        its stream's path applies to it: `apply_pod_resources`, or `apply_listed_devices`.
        None, having changed nothing, for the full path to apply it: a body too large for the
        event loop, a notification outbox to fill (the full path fills it), or whatever the
        stream's path leaves to the full path."""
        if (
            body_bytes is None
            or body_bytes > EVENT_LOOP_MAX_BODY
            or outbox_of(database.sessions.kw.get("info", {})) is not None
        ):
            return None
        apply: Callable[..., Awaitable[EventLog | None]]
        if isinstance(snapshot, PodResourcesSnapshot):
            apply = functools.partial(apply_pod_resources, database.statements, snapshot)
        elif self._may_apply_listed_devices(snapshot):
            stored = self.recent.has_stored(snapshot.node, stream_of(snapshot))
            apply = functools.partial(
                apply_listed_devices, database.statements, snapshot, stored=stored
            )
        else:
            return None
        log = await apply(
            content_hash=content_hash,
            actor=actor,
            now=utcnow(),
            max_node_devices=self.max_node_devices,
            stale_after=self.stale_after,
        )
        return None if log is None else _result_of(log)

    def _may_apply_listed_devices(self, snapshot: ListAndWatchSnapshot) -> bool:
        """Whether `apply_listed_devices` is worth trying: a snapshot without a registration
        or a derived health."""
        return snapshot.plugin is None and snapshot.health_source != DERIVED

    async def _apply_in_event_loop(
        self, apply_snapshot: ApplySnapshot, body_bytes: int | None
    ) -> IngestResult | None:
        """The full path in the event loop; None when it is not for here (SQLite, a large or
        unknown body size) or met a pooled connection the server dropped, and a worker thread
        should apply it.

        After a drop the worker thread applies the snapshot again. That is safe: the
        transaction here rolled back, or, if the drop came during COMMIT and the commit took,
        the same seq with the same content is answered as a repeat."""
        database = self.event_loop_database
        if database is None or body_bytes is None or body_bytes > EVENT_LOOP_MAX_BODY:
            return None
        try:
            async with database.sessions() as session, session.begin():
                return await session.run_sync(lambda sync: apply_snapshot(sync, now=utcnow()))
        except DBAPIError as e:
            if e.connection_invalidated:
                return None
            raise

    def _apply_in_thread(self, apply_snapshot: ApplySnapshot) -> IngestResult:
        with write_session(self.factory) as session:
            result: IngestResult = apply_snapshot(session, now=utcnow())
            return result
