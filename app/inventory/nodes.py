"""Finding and locking a node row, and the ordering rules for its snapshot streams."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, cast

from sqlalchemy import CursorResult, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.inventory.errors import ConflictingRepeat, Problem, StaleSnapshot
from app.inventory.events import EventLog
from app.inventory.models import IngestReceipt, Node
from app.inventory.schemas import Source


def lock_node(session: Session, name: str, now: datetime, log: EventLog) -> Node:
    """The node's row, created if new, locked until the transaction ends.

    The row lock serialises snapshots for one node on PostgreSQL; SQLite writers are already
    serialised by the IMMEDIATE transaction.
    """
    node = session.scalars(select(Node).where(Node.name == name).with_for_update()).one_or_none()
    if node is not None:
        return node
    dialect_insert = (
        postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    )
    # RETURNING tells whether this transaction inserted the row; rowcount cannot (-1 on
    # PostgreSQL through the ORM), and a concurrent first snapshot may have won the insert.
    inserted = session.execute(
        dialect_insert(Node)
        .values(name=name, first_seen=now, last_seen=now)
        .on_conflict_do_nothing(index_elements=["name"])
        .returning(Node.id)
    ).first()
    if inserted is not None:
        log.add("node_added", node=name)
    return session.scalars(select(Node).where(Node.name == name).with_for_update()).one()


def mark_node_seen(session: Session, node: Node, now: datetime, log: EventLog) -> None:
    node.last_seen = now
    if node.stale_since is not None:
        log.add("node_seen", node=node.name, before={"stale_since": node.stale_since.isoformat()})
        node.stale_since = None


class Order(StrEnum):
    APPLY = "apply"
    REPEAT = "repeat"


def check_order(
    receipt: IngestReceipt | None, source: Source, payload_hash: str, stream: str
) -> Order:
    """Where a snapshot stands against the last one applied for its stream.

    Raises StaleSnapshot for an older seq of the same boot, ConflictingRepeat for a seq seen
    before with other content.
    """
    if receipt is None or receipt.boot_id != source.boot_id:
        return Order.APPLY
    if source.seq > receipt.seq:
        return Order.APPLY
    if source.seq == receipt.seq:
        if receipt.payload_hash == payload_hash:
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


def find_receipt(session: Session, node_id: int, stream: str) -> IngestReceipt | None:
    return session.scalars(
        select(IngestReceipt).where(
            IngestReceipt.node_id == node_id, IngestReceipt.stream == stream
        )
    ).one_or_none()


def record_receipt(
    session: Session,
    receipt: IngestReceipt | None,
    *,
    node_id: int,
    stream: str,
    source: Source,
    payload_hash: str,
    observed_at: datetime,
    now: datetime,
) -> None:
    if receipt is None:
        receipt = IngestReceipt(node_id=node_id, stream=stream)
        session.add(receipt)
    receipt.boot_id = source.boot_id
    receipt.seq = source.seq
    receipt.payload_hash = payload_hash
    receipt.content_hash = payload_hash
    receipt.observed_at = observed_at
    receipt.received_at = now


def forget_content_hash(session: Session, node_id: int, stream: str) -> None:
    """Another writer changed rows this stream owns: its next snapshot must be applied in full."""
    session.execute(
        update(IngestReceipt)
        .where(IngestReceipt.node_id == node_id, IngestReceipt.stream == stream)
        .values(content_hash=None)
    )


def listandwatch_stream(resource: str) -> str:
    return f"listandwatch/{resource}"


PODRESOURCES_STREAM = "podresources"


def record_unchanged_snapshot(
    session: Session,
    *,
    node_name: str,
    stream: str,
    source: Source,
    content_hash: str,
    observed_at: datetime,
    now: datetime,
) -> bool:
    """The common case in two statements: a newer seq whose content equals the last applied.

    Touches only the node's last-seen time and the stream's receipt. Returns False, having
    changed nothing that matters, when the snapshot needs the full path (new node, stale node,
    other content, other boot, older or repeated seq). The first UPDATE also takes the node's
    row lock, as the full path would.
    """
    node_id = session.execute(
        update(Node)
        .where(Node.name == node_name, Node.stale_since.is_(None))
        .values(last_seen=now)
        .returning(Node.id)
    ).scalar_one_or_none()
    if node_id is None:
        return False
    touched = cast(
        CursorResult[Any],
        session.execute(
            update(IngestReceipt)
            .where(
                IngestReceipt.node_id == node_id,
                IngestReceipt.stream == stream,
                IngestReceipt.boot_id == source.boot_id,
                IngestReceipt.seq < source.seq,
                IngestReceipt.content_hash == content_hash,
            )
            .values(
                seq=source.seq,
                payload_hash=content_hash,
                observed_at=observed_at,
                received_at=now,
            )
        ),
    )
    return touched.rowcount == 1
