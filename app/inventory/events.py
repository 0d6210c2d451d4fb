"""The change log: event kinds, and writing them in the caller's transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, insert, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from app.inventory.models import Event, table_of

NOTIFY_CHANNEL = "devicedeck_events"

_events = table_of(Event)
# Core statements built once: the ORM's bulk insert and expression building cost more CPU per
# snapshot than the database spends on the rows.
_INSERT_EVENTS = insert(_events)
# PostgreSQL: the rows travel as one JSON parameter, and the notification rides in the same
# statement. An executemany costs a statement per row, each with a dozen parameters to convert.
# Keys left out of a row (None values) arrive as SQL NULL.
_PER_ROW_COLUMNS = {
    "kind": "text",
    "node": "text",
    "resource": "text",
    "device_id": "text",
    "device_pk": "bigint",
    "namespace": "text",
    "pod": "text",
    "container": "text",
    "before": "json",
    "after": "json",
}
_INSERT_EVENTS_AND_NOTIFY = text(
    f"""WITH inserted AS (
    INSERT INTO events (at, actor, {", ".join(_PER_ROW_COLUMNS)})
    SELECT :at, :actor, {", ".join(f"r.{c}" for c in _PER_ROW_COLUMNS)}
    FROM jsonb_to_recordset(:rows)
        AS r({", ".join(f"{c} {t}" for c, t in _PER_ROW_COLUMNS.items())})
    RETURNING 1
)
SELECT pg_notify('{NOTIFY_CHANNEL}', count(*)::text) FROM inserted"""
).bindparams(
    bindparam("at", type_=_events.c.at.type),
    bindparam("rows", type_=postgresql.JSONB),
)

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
        rows = [
            {key: row[key] for key in _PER_ROW_COLUMNS if row[key] is not None} for row in self.rows
        ]
        session.execute(
            _INSERT_EVENTS_AND_NOTIFY, {"at": self.at, "actor": self.actor, "rows": rows}
        )
