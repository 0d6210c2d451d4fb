"""Stream receipts and ordering: the ordering rules of a node's snapshot streams, the receipt
of the last snapshot applied, and the unchanged-snapshot statement that advances a receipt
without applying anything (after taking the node's row lock, as inventory/write/node_lock.py
does for the full path).

The statements every snapshot runs are built once, with bind parameters: building a SQLAlchemy
expression costs more CPU than PostgreSQL spends executing these ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, NamedTuple, Protocol, cast

from sqlalchemy import CursorResult, Update, bindparam, insert, select, update
from sqlalchemy.orm import Session

from devicedeck.inventory.errors import ConflictingRepeat, Problem, StaleSnapshot
from devicedeck.inventory.models import IngestReceipt, Node, table_of
from devicedeck.inventory.schemas import Placed, Source
from devicedeck.inventory.write.bulk import Write
from devicedeck.inventory.write.driver_sql import DriverStatement, in_utc

_nodes = table_of(Node)
_receipts = table_of(IngestReceipt)


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


class ReceiptColumns(Protocol):
    """A named row that carries RECEIPT_COLUMNS' values among others; `receipt_id` is None
    where the read found no receipt."""

    @property
    def receipt_id(self) -> int | None: ...
    @property
    def boot_id(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def payload_hash(self) -> str: ...
    @property
    def content_hash(self) -> str | None: ...
    @property
    def boot_started_at(self) -> datetime | None: ...


def receipt_of_row(row: ReceiptColumns) -> StreamReceipt | None:
    """The receipt a named row carries, None where the read found none."""
    if row.receipt_id is None:
        return None
    return StreamReceipt(
        row.receipt_id,
        row.boot_id,
        row.seq,
        row.payload_hash,
        row.content_hash,
        in_utc(row.boot_started_at),
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
# (inventory/write/unchanged.py): SQLAlchemy's own execution (parameter and result processing, its
# async adaptation) cost as much CPU as the rest of an unchanged snapshot's request. Every
# parameter is a str, int or aware datetime, which the driver converts as the column types
# would. A node row another transaction holds is skipped there, not waited for (the snapshot
# then takes the full path, which waits): the snapshots queued behind the statement must not
# wait for it.
ADVANCE_UNCHANGED_SQL = DriverStatement(_advance_unchanged_in_one(skip_locked=True)).sql
