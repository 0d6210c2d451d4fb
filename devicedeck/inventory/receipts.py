"""Stream receipts and ordering: locking a snapshot's node row, the ordering rules of its
snapshot streams, the receipt of the last snapshot applied, and the unchanged-snapshot
statement that advances a receipt without applying anything.

The statements every snapshot runs are built once, with bind parameters: building a SQLAlchemy
expression costs more CPU than PostgreSQL spends executing these ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, NamedTuple, cast

from sqlalchemy import (
    CursorResult,
    Update,
    bindparam,
    exists,
    false,
    insert,
    null,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from devicedeck.inventory.bulk import Write
from devicedeck.inventory.driver_sql import DriverStatement, in_utc
from devicedeck.inventory.errors import ConflictingRepeat, Problem, StaleSnapshot
from devicedeck.inventory.events import EventLog
from devicedeck.inventory.models import IngestReceipt, Node, table_of
from devicedeck.inventory.schemas import Placed, Source

_nodes = table_of(Node)
_receipts = table_of(IngestReceipt)

_LOCK_NODE = select(Node).where(Node.name == bindparam("name")).with_for_update()
# The row's lock, and what a snapshot must know of the node's past: when it was last seen (an
# outage the sweep missed is noticed here) and whether the sweep marked it stale.
_LOCK_SEEN_NODE = (
    select(_nodes.c.id, _nodes.c.last_seen, _nodes.c.stale_since)
    .where(_nodes.c.name == bindparam("node_name"))
    .with_for_update()
)
_NOW = bindparam("now", type_=_nodes.c.last_seen.type)
_TOUCH_NODE = (
    update(_nodes)
    .where(_nodes.c.id == bindparam("for_node"))
    .values(last_seen=_NOW, stale_since=None)
)


def lock_node(session: Session, name: str, now: datetime, log: EventLog) -> Node:
    """The node's row, created if new, locked until the transaction ends.

    The row lock serialises snapshots for one node on PostgreSQL; SQLite writers are already
    serialised by the IMMEDIATE transaction.
    """
    node = session.scalars(_LOCK_NODE, {"name": name}).one_or_none()
    if node is not None:
        return node
    _insert_node(session, name, now, log)
    return session.scalars(_LOCK_NODE, {"name": name}).one()


_NEW_NODE = {"name": bindparam("node_name"), "first_seen": _NOW, "last_seen": _NOW}
# RETURNING tells whether this transaction inserted the row; rowcount cannot (-1 on
# PostgreSQL through the ORM), and a concurrent first snapshot may have won the insert.
_INSERT_NODE = {
    "postgresql": postgresql.insert(_nodes)
    .values(_NEW_NODE)
    .on_conflict_do_nothing(index_elements=["name"])
    .returning(_nodes.c.id),
    "sqlite": sqlite.insert(_nodes)
    .values(_NEW_NODE)
    .on_conflict_do_nothing(index_elements=["name"])
    .returning(_nodes.c.id),
}


def _insert_node(session: Session, name: str, now: datetime, log: EventLog) -> int | None:
    """Insert the node's row if no other has its name; its id if this transaction inserted it
    (the row is then locked until the transaction ends), else None."""
    statement = _INSERT_NODE[session.get_bind().dialect.name]
    inserted = session.execute(statement, {"node_name": name, "now": now}).scalar()
    if inserted is None:
        return None
    log.add("node_added", node=name)
    return int(inserted)


# PostgreSQL locks the row and marks it seen in one statement, returning the row as it was
# before: a CTE's FOR UPDATE takes the lock (waiting for another writer of the node), and
# the UPDATE then changes the locked row.
_locked = (
    select(_nodes.c.id, _nodes.c.last_seen, _nodes.c.stale_since)
    .where(_nodes.c.name == bindparam("node_name"))
    .with_for_update()
    .cte("locked")
)
_LOCK_AND_TOUCH_NODE = (
    update(_nodes)
    .where(_nodes.c.id == _locked.c.id)
    .values(last_seen=_NOW, stale_since=None)
    .returning(_locked.c.id, _locked.c.last_seen, _locked.c.stale_since)
)
# The same, or, when there is no row to lock, the insert of a new node's row, in one statement:
# a new node's first snapshot would otherwise wait for both in turn. A row another transaction
# is inserting makes the insert wait for it, then do nothing: no row comes back.
_touched = _LOCK_AND_TOUCH_NODE.cte("touched")
_inserted = (
    postgresql.insert(_nodes)
    .from_select(
        ["name", "first_seen", "last_seen"],
        select(bindparam("node_name", type_=_nodes.c.name.type), _NOW, _NOW).where(
            ~exists(_locked.select())
        ),
    )
    .on_conflict_do_nothing(index_elements=["name"])
    .returning(_nodes.c.id)
    .cte("inserted")
)
LOCK_TOUCH_OR_INSERT_NODE_SQL = DriverStatement(
    union_all(
        select(_touched.c.id, _touched.c.last_seen, _touched.c.stale_since, false().label("new")),
        select(_inserted.c.id, null(), null(), true()),
    )
)


class LockedNode(NamedTuple):
    id: int
    # Inserted by this transaction: nothing refers to it yet (no receipt, no device).
    new: bool


def _went_silent_stale(
    last_seen: datetime, now: datetime, stale_after: timedelta | None
) -> datetime | None:
    """When a node last seen at `last_seen` turned stale, if it has by `now`, marked or not."""
    if stale_after is None or now - last_seen <= stale_after:
        return None
    return last_seen + stale_after


def plainly_locked_node(
    rows: Sequence[Sequence[Any]],
    name: str,
    now: datetime,
    log: EventLog,
    stale_after: timedelta | None,
) -> LockedNode | None:
    """The node as `LOCK_TOUCH_OR_INSERT_NODE_SQL`'s rows give it, for a transaction that
    applies only the common case: with its node_added event logged, if the statement inserted
    it. None where `lock_node_seen` has more to do: another transaction is inserting the row
    (it waits for that lock), or the node is back from an outage (its events)."""
    if not rows:
        return None
    node_id, last_seen, stale_since, new = rows[0]
    if new:
        log.add("node_added", node=name)
    elif stale_since is not None or _went_silent_stale(in_utc(last_seen), now, stale_after):
        return None
    return LockedNode(int(node_id), new=bool(new))


def lock_node_seen(
    session: Session,
    name: str,
    now: datetime,
    log: EventLog,
    stale_after: timedelta | None = None,
) -> LockedNode:
    """Lock the node's row (created if new) for a snapshot from it, mark it seen now and no
    longer stale. The whole of it is undone if the snapshot is refused.

    A node silent for longer than `stale_after` that no sweep marked stale (it came back
    first) gets its node_stale event now, dated when the sweep would have marked it."""
    postgresql = session.get_bind().dialect.name == "postgresql"
    names = {"node_name": name, "now": now}
    row: Sequence[Any] | None
    # New: seen now, and never stale.
    if postgresql:
        # id, last_seen, stale_since, inserted
        row = cast(
            Sequence[Any] | None, LOCK_TOUCH_OR_INSERT_NODE_SQL.execute(session, names).first()
        )
        if row is not None and row[3]:
            log.add("node_added", node=name)
            return LockedNode(int(row[0]), new=True)
    else:
        row = session.execute(_LOCK_SEEN_NODE, names).first()
        if row is None and (inserted := _insert_node(session, name, now, log)) is not None:
            return LockedNode(inserted, new=True)
    if row is None:
        # Another transaction inserted it first; wait for its lock.
        row = session.execute(_LOCK_AND_TOUCH_NODE if postgresql else _LOCK_SEEN_NODE, names).one()
    node_id, last_seen, stale_since = row[0], in_utc(row[1]), in_utc(row[2])
    if not postgresql:
        session.execute(_TOUCH_NODE, {"for_node": node_id, "now": now})
    if (
        stale_since is None
        and (stale_since := _went_silent_stale(last_seen, now, stale_after)) is not None
    ):
        # Its own log: the events of one log share their time, and this one is in the past.
        outage = EventLog(at=stale_since, actor=log.actor)
        outage.add("node_stale", node=name, before={"last_seen": last_seen.isoformat()})
        outage.write(session)
    if stale_since is not None:
        log.add("node_seen", node=name, before={"stale_since": stale_since.isoformat()})
    return LockedNode(int(node_id), new=False)


class Order(StrEnum):
    APPLY = "apply"
    REPEAT = "repeat"
    # From a boot that began before the one the stream last applied: changes nothing.
    LATE = "late"


def check_order(
    receipt: StreamReceipt | None, source: Source, content_hash: str, stream: str
) -> Order:
    """Where a snapshot stands against the last one applied for its stream.

    Raises StaleSnapshot for an older seq of the same boot, ConflictingRepeat for a seq seen
    before with other content. Another boot's snapshot is late when both boots' starts are
    known and it began before the stream's; otherwise it starts a new sequence.
    """
    if receipt is None:
        return Order.APPLY
    if receipt.boot_id != source.boot_id:
        if (
            source.boot_started_at is not None
            and receipt.boot_started_at is not None
            and source.boot_started_at < receipt.boot_started_at
        ):
            return Order.LATE
        return Order.APPLY
    if source.seq > receipt.seq:
        return Order.APPLY
    if source.seq == receipt.seq:
        if receipt.payload_hash == content_hash:
            return Order.REPEAT
        raise ConflictingRepeat(
            f"seq {source.seq} of boot {source.boot_id!r} was already applied to stream "
            f"{stream!r} with different content",
            [Problem("source.seq", "unique_per_content", "reuse of a seq with other content")],
        )
    raise StaleSnapshot(
        f"stream {stream!r} is at seq {receipt.seq} of boot {source.boot_id!r}; "
        f"seq {source.seq} is older",
        [
            Problem(
                "source.seq",
                "increasing",
                f"must be greater than {receipt.seq} for boot {source.boot_id!r}",
            )
        ],
    )


@dataclass(frozen=True)
class StreamReceipt:
    """The last snapshot applied for a stream, as ordering needs it.

    Both hashes are written with the same value, the content hash of the last snapshot
    applied; they differ in who may clear them. `payload_hash` is never cleared: a repeat of
    the last seq is recognised by it. `content_hash` is cleared (None) when another writer
    changed the stream's rows, so it matches only while the rows are still what that content
    made them, which is what the unchanged shortcut needs."""

    id: int
    boot_id: str
    seq: int
    payload_hash: str
    content_hash: str | None
    boot_started_at: datetime | None = None


# What StreamReceipt holds, in its order.
RECEIPT_COLUMNS = (
    _receipts.c.id,
    _receipts.c.boot_id,
    _receipts.c.seq,
    _receipts.c.payload_hash,
    _receipts.c.content_hash,
    _receipts.c.boot_started_at,
)


def receipt_of(columns: Sequence[Any]) -> StreamReceipt:
    """A receipt from RECEIPT_COLUMNS' values, as any read returns them."""
    receipt_id, boot_id, seq, payload_hash, content_hash, boot_started_at = columns
    return StreamReceipt(
        receipt_id, boot_id, seq, payload_hash, content_hash, in_utc(boot_started_at)
    )


_FIND_RECEIPT = select(*RECEIPT_COLUMNS).where(
    _receipts.c.node_id == bindparam("node_id"), _receipts.c.stream == bindparam("stream")
)
_RECEIPT_FIELDS = {
    "boot_id": bindparam("to_boot"),
    "seq": bindparam("to_seq"),
    "payload_hash": bindparam("to_hash"),
    "content_hash": bindparam("to_hash"),
    "observed_at": bindparam("observed", type_=_receipts.c.observed_at.type),
    "received_at": bindparam("now", type_=_receipts.c.received_at.type),
    "boot_started_at": bindparam("boot_started", type_=_receipts.c.boot_started_at.type),
}
_UPDATE_RECEIPT = (
    update(_receipts).where(_receipts.c.id == bindparam("receipt_id")).values(_RECEIPT_FIELDS)
)
_INSERT_RECEIPT = insert(_receipts).values(
    node_id=bindparam("for_node"), stream=bindparam("for_stream"), **_RECEIPT_FIELDS
)
# The same two, for a statement of several writes on PostgreSQL (`receipt_write`).
_UPDATE_RECEIPT_SQL = (
    f"UPDATE {_receipts.name} SET "
    + ", ".join(f"{column} = :{bind.key}" for column, bind in _RECEIPT_FIELDS.items())
    + " WHERE id = :receipt_id"
)
_INSERT_RECEIPT_SQL = (
    f"INSERT INTO {_receipts.name} (node_id, stream, {', '.join(_RECEIPT_FIELDS)}) "
    f"VALUES (:for_node, :for_stream, {', '.join(f':{b.key}' for b in _RECEIPT_FIELDS.values())})"
)
_RECEIPT_TIMES = (
    _RECEIPT_FIELDS["observed_at"],
    _RECEIPT_FIELDS["received_at"],
    _RECEIPT_FIELDS["boot_started_at"],
)


def find_receipt(session: Session, node_id: int, stream: str) -> StreamReceipt | None:
    row = session.execute(_FIND_RECEIPT, {"node_id": node_id, "stream": stream}).first()
    return None if row is None else receipt_of(row)


class ReceiptRecord(NamedTuple):
    """What a stream's receipt records of the snapshot just applied."""

    node_id: int
    stream: str
    source: Source
    content_hash: str
    observed_at: datetime
    now: datetime

    def fields(self) -> dict[str, Any]:
        return {
            "to_boot": self.source.boot_id,
            "to_seq": self.source.seq,
            "to_hash": self.content_hash,
            "observed": self.observed_at,
            "now": self.now,
            "boot_started": self.source.boot_started_at,
        }


def record_receipt(session: Session, receipt: StreamReceipt | None, record: ReceiptRecord) -> None:
    if receipt is None:
        new = {"for_node": record.node_id, "for_stream": record.stream}
        session.execute(_INSERT_RECEIPT, {**record.fields(), **new})
    else:
        session.execute(_UPDATE_RECEIPT, {**record.fields(), "receipt_id": receipt.id})


def receipt_write(receipt: StreamReceipt | None, record: ReceiptRecord) -> Write:
    """`record_receipt` on PostgreSQL, as a part of a statement of several writes."""
    if receipt is None:
        new = {"for_node": record.node_id, "for_stream": record.stream}
        return Write(_INSERT_RECEIPT_SQL, _RECEIPT_TIMES, {**record.fields(), **new})
    return Write(_UPDATE_RECEIPT_SQL, _RECEIPT_TIMES, {**record.fields(), "receipt_id": receipt.id})


def forget_content_hash(session: Session, node_id: int, stream: str) -> None:
    """Another writer changed rows this stream owns: its next snapshot must be applied in full."""
    forget_content_hashes(session, node_id, [stream])


_FORGET_CONTENT_HASHES = (
    update(_receipts)
    .where(
        _receipts.c.node_id == bindparam("of_node"),
        _receipts.c.stream.in_(bindparam("streams", expanding=True)),
    )
    .values(content_hash=None)
)


def forget_content_hashes(session: Session, node_id: int, streams: list[str]) -> None:
    """`forget_content_hash` for several of the node's streams, in one statement."""
    if streams:
        session.execute(_FORGET_CONTENT_HASHES, {"of_node": node_id, "streams": streams})


def listandwatch_stream(resource: str) -> str:
    return f"listandwatch/{resource}"


PODRESOURCES_STREAM = "podresources"


_TOUCH_FRESH_NODE = (
    update(_nodes)
    .where(
        _nodes.c.name == bindparam("node_name"),
        _nodes.c.stale_since.is_(None),
        _nodes.c.last_seen >= bindparam("fresh_since", type_=_nodes.c.last_seen.type),
    )
    .values(last_seen=bindparam("now", type_=_nodes.c.last_seen.type))
    .returning(_nodes.c.id)
)
_RECEIPT_IS_UNCHANGED_BEFORE = (
    _receipts.c.stream == bindparam("for_stream"),
    _receipts.c.boot_id == bindparam("for_boot"),
    _receipts.c.seq < bindparam("new_seq"),
    _receipts.c.content_hash == bindparam("same_hash"),
)
_RECEIPT_ADVANCED = {
    "seq": bindparam("new_seq"),
    "payload_hash": bindparam("same_hash"),
    "observed_at": bindparam("observed", type_=_receipts.c.observed_at.type),
    "received_at": bindparam("now", type_=_receipts.c.received_at.type),
}
_ADVANCE_UNCHANGED_RECEIPT = (
    update(_receipts)
    .where(_receipts.c.node_id == bindparam("for_node"), *_RECEIPT_IS_UNCHANGED_BEFORE)
    .values(_RECEIPT_ADVANCED)
)


# PostgreSQL does it all in one statement, which changes nothing unless the snapshot is
# unchanged, so it is safe outside an explicit transaction: lock the fresh node row first (as
# the full path would), advance the receipt if it matches, then touch the node.
def _advance_unchanged_in_one(*, skip_locked: bool) -> Update:
    locked_fresh_node = (
        select(_nodes.c.id)
        .where(
            _nodes.c.name == bindparam("node_name"),
            _nodes.c.stale_since.is_(None),
            _nodes.c.last_seen >= bindparam("fresh_since", type_=_nodes.c.last_seen.type),
        )
        .with_for_update(skip_locked=skip_locked)
        .cte("fresh_node")
    )
    advanced_receipt = (
        update(_receipts)
        .where(_receipts.c.node_id == locked_fresh_node.c.id, *_RECEIPT_IS_UNCHANGED_BEFORE)
        .values(_RECEIPT_ADVANCED)
        .returning(_receipts.c.node_id)
        .cte("advanced_receipt")
    )
    return (
        update(_nodes)
        .where(_nodes.c.id == advanced_receipt.c.node_id)
        .values(last_seen=bindparam("now", type_=_nodes.c.last_seen.type))
        .returning(_nodes.c.id)
    )


_ADVANCE_UNCHANGED_IN_ONE = _advance_unchanged_in_one(skip_locked=False)

# Before any node was seen: with no stale_after, every node is fresh.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Bind parameters of the unchanged-snapshot statements for one snapshot.
UnchangedCheck = dict[str, Any]


def unchanged_check(
    snapshot: Placed,
    *,
    stream: str,
    content_hash: str,
    now: datetime,
    stale_after: timedelta | None = None,
) -> UnchangedCheck:
    """A node back from a silence longer than `stale_after` takes the full path, which records
    the outage."""
    return {
        "fresh_since": now - stale_after if stale_after is not None else EPOCH,
        "node_name": snapshot.node,
        "for_stream": stream,
        "for_boot": snapshot.source.boot_id,
        "new_seq": snapshot.source.seq,
        "same_hash": content_hash,
        "observed": snapshot.observed_at,
        "now": now,
    }


def record_unchanged_snapshot(session: Session, check: UnchangedCheck) -> bool:
    """The common case, in one statement on PostgreSQL and two on SQLite: a newer seq whose
    content equals the last applied.

    Touches only the node's last-seen time and the stream's receipt. Returns False, having
    changed nothing that matters, when the snapshot needs the full path (new node, stale node,
    other content, other boot, older or repeated seq). The first statement also takes the
    node's row lock, as the full path would.
    """
    if session.get_bind().dialect.name == "postgresql":
        return session.execute(_ADVANCE_UNCHANGED_IN_ONE, check).first() is not None
    node_id = session.execute(_TOUCH_FRESH_NODE, check).scalar_one_or_none()
    if node_id is None:
        return False
    touched = cast(
        CursorResult[Any],
        session.execute(_ADVANCE_UNCHANGED_RECEIPT, {**check, "for_node": node_id}),
    )
    return touched.rowcount == 1


# Rendered once for the async driver, which runs it on a pooled connection
# (inventory/unchanged.py): SQLAlchemy's own execution (parameter and result processing, its
# async adaptation) cost as much CPU as the rest of an unchanged snapshot's request. Every
# parameter is a str, int or aware datetime, which the driver converts as the column types
# would. A node row another transaction holds is skipped there, not waited for (the snapshot
# then takes the full path, which waits): the snapshots queued behind the statement must not
# wait for it.
ADVANCE_UNCHANGED_SQL = DriverStatement(_advance_unchanged_in_one(skip_locked=True)).sql
