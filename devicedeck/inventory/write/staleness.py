"""Nodes that stop reporting turn stale: marked once, with an event, never deleted."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from devicedeck.inventory.events import EventLog
from devicedeck.inventory.models import Node


def mark_stale_nodes(session: Session, now: datetime, cutoff: datetime) -> list[str]:
    """Mark nodes last seen before cutoff as stale; returns their names.

    Rows are locked and re-checked, so two service processes sweeping at once write one event.
    """
    nodes = list(
        session.scalars(
            select(Node)
            .where(Node.last_seen < cutoff, Node.stale_since.is_(None))
            .order_by(Node.id)
            .with_for_update(skip_locked=True)
        )
    )
    log = EventLog(at=now, actor="stale-sweep")
    for node in nodes:
        node.stale_since = now
        log.add("node_stale", node=node.name, before={"last_seen": node.last_seen.isoformat()})
    log.write(session)
    return [node.name for node in nodes]
