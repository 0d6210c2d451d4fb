"""The change log: event kinds, and writing them in the caller's transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import insert, text
from sqlalchemy.orm import Session

from app.inventory.bulk import json_rows, json_rows_binds, json_rows_insert_sql
from app.inventory.models import Event, table_of

NOTIFY_CHANNEL = "devicedeck_events"

_events = table_of(Event)
# Core statements built once: the ORM's bulk insert and expression building cost more CPU per
# snapshot than the database spends on the rows.
_INSERT_EVENTS = insert(_events)
# PostgreSQL: one statement for the rows (see app/inventory/bulk.py) and the notification.
_PER_ROW = (
    "kind",
    "node",
    "resource",
    "device_id",
    "device_pk",
    "namespace",
    "pod",
    "container",
    "before",
    "after",
)
_SHARED = ("at", "actor")
_INSERT_EVENTS_AND_NOTIFY = text(
    f"WITH inserted AS ({json_rows_insert_sql(_events, per_row=_PER_ROW, shared=_SHARED)} "
    f"RETURNING 1) SELECT pg_notify('{NOTIFY_CHANNEL}', count(*)::text) FROM inserted"
).bindparams(*json_rows_binds(_events, _SHARED))

EVENT_KINDS = (
    "node_added",
    "node_seen",
    "node_stale",
    "device_added",
    "device_removed",
    "device_reappeared",
    "health_changed",
    "topology_changed",
    "allocated",
    "released",
    "claim_allocated",
    "claim_released",
    "plugin_registered",
    "plugin_changed",
    "admin_action",
)


@dataclass
class EventLog:
    """Events collected during one change, written together at the end of it."""

    at: datetime
    actor: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(
        self,
        kind: str,
        *,
        node: str | None = None,
        resource: str | None = None,
        device_id: str | None = None,
        device_pk: int | None = None,
        namespace: str | None = None,
        pod: str | None = None,
        container: str | None = None,
        before: dict[str, Any] | None = None,
        after: dict[str, Any] | None = None,
    ) -> None:
        assert kind in EVENT_KINDS, kind
        self.rows.append(
            {
                "at": self.at,
                "kind": kind,
                "node": node,
                "resource": resource,
                "device_id": device_id,
                "device_pk": device_pk,
                "namespace": namespace,
                "pod": pod,
                "container": container,
                "before": before,
                "after": after,
                "actor": self.actor,
            }
        )

    def count(self, kind: str) -> int:
        return sum(1 for row in self.rows if row["kind"] == kind)

    def write(self, session: Session) -> None:
        """Insert the events; on PostgreSQL also tell listeners, delivered at commit."""
        if not self.rows:
            return
        if session.get_bind().dialect.name != "postgresql":
            session.execute(_INSERT_EVENTS, self.rows)
            return
        rows = json_rows(self.rows, _PER_ROW)
        session.execute(
            _INSERT_EVENTS_AND_NOTIFY, {"at": self.at, "actor": self.actor, "rows": rows}
        )
