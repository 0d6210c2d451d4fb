"""Locking a snapshot's node row: created if new, marked seen, and back from an outage the stale
sweep missed (a node silent for longer than the stale limit gets its node_stale event when it
reports again).

Every snapshot of a node takes this lock first, so snapshots of one node apply one at a time on
PostgreSQL; SQLite writers are already one at a time. The statements are built once, with bind
parameters: building a SQLAlchemy expression costs more CPU than PostgreSQL spends executing
them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple, cast

from sqlalchemy import bindparam, exists, false, null, select, true, union_all, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from devicedeck.inventory.events import EventLog
from devicedeck.inventory.models import Node, table_of
from devicedeck.inventory.write.driver_sql import DriverStatement, in_utc

_nodes = table_of(Node)

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
