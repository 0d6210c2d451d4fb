"""The change log: event kinds, and writing them in the caller's transaction."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, get_args

from sqlalchemy.orm import Session

from devicedeck.inventory.models import Event, table_of
from devicedeck.inventory.notifications.alerts import write_outbox
from devicedeck.inventory.write.bulk import BulkInsert, Write, write_together

_INSERT_EVENTS = BulkInsert(
    table_of(Event),
    shared=("at", "actor"),
    per_row=(
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
    ),
)

# Only these kinds always name a device row, so only their missing device_pk means a device
# inserted by the same statement. A join, not a subquery per row, which scanned every new device
# for every event: work that grew with the square of a new node's devices.
_DEVICE_EVENTS = ("device_added", "allocated")
_PK_OF_NEW_DEVICE = {"device_pk": "coalesce(r.device_pk, n.id)"}


@functools.cache
def _join_new_devices(new_devices: str) -> str:
    kinds = ", ".join(f"'{kind}'" for kind in _DEVICE_EVENTS)
    return (
        f"LEFT JOIN {new_devices} n ON r.device_pk IS NULL AND r.kind IN ({kinds})"
        " AND n.resource = r.resource AND n.device_id = r.device_id"
    )


EventKind = Literal[
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
    "dra_health_changed",
    "plugin_registered",
    "plugin_changed",
    "admin_action",
    "devices_counted",
]
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)


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
        """Insert the events. The alerts they start or end go to the notification outbox,
        when it has targets."""
        _INSERT_EVENTS.execute(session, self.rows)
        write_outbox(session, self.rows)

    def write_with(
        self, session: Session, writes: Sequence[Write], *, new_devices: str | None = None
    ) -> None:
        """`write` on PostgreSQL, in one statement with the transaction's other `writes`
        (devicedeck/inventory/write/bulk.py `write_together`), which go before the events.

        `new_devices` names the part of `writes` that inserts devices, returning their id,
        resource and device_id: a device's or an allocation's event logged with no device_pk
        names one of those, whose id the statement finds."""
        together = self.written_after(writes, new_devices=new_devices)
        if together:
            write_together(session, together)
        write_outbox(session, self.rows)

    def written_after(
        self, writes: Sequence[Write], *, new_devices: str | None = None
    ) -> list[Write]:
        """`writes`, then the events' insert, as parts of one statement
        (`write_together`, as `write_with` says); the alerts' outbox is not among them."""
        together = list(writes)
        if self.rows:
            if new_devices is None:
                insert = _INSERT_EVENTS.write(self.rows, returning="1")
            else:
                insert = _INSERT_EVENTS.write(
                    self.rows,
                    returning="1",
                    computed=_PK_OF_NEW_DEVICE,
                    join=_join_new_devices(new_devices),
                )
            together.append(insert)
        return together
