"""The ListAndWatch stream: one (node, resource)'s device list, as its device plugin reports it.

A snapshot replaces the whole list, as the kubelet does with each ListAndWatch message: devices
missing from it become removed, and come back if they reappear. A derived list (no tap) is
also weighed against the Node's status (devicedeck/inventory/write/derived_health.py): a device
it does not offer is unhealthy, removed, or one of those without telling which
(`presence_uncertain`), and a device the agent no longer lists counts as not offered, since an
agent that restarts forgets the devices it saw. The stream also owns the plugin's registration.
Other writers change these rows only through devicedeck/inventory/write/other_writers.py, which
keeps the stream's receipt consistent.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Text, and_, bindparam, cast, func, insert, select, update
from sqlalchemy.orm import Session

from devicedeck.inventory.events import EventLog
from devicedeck.inventory.fields import HEALTHY, PRESENT, REMOVED, UNHEALTHY, numa_nodes_of
from devicedeck.inventory.models import Device, IngestReceipt, Node, PluginRegistration, table_of
from devicedeck.inventory.schemas import ListAndWatchSnapshot, PluginDevice
from devicedeck.inventory.write.bulk import BulkInsertReturning, BulkUpdate, Write
from devicedeck.inventory.write.derived_health import DERIVED, GONE, UNCERTAIN, status_counts
from devicedeck.inventory.write.derived_judging import judge_stored, stored_after
from devicedeck.inventory.write.driver_sql import DriverStatement, in_utc
from devicedeck.inventory.write.node_limits import check_device_total
from devicedeck.inventory.write.receipts import (
    RECEIPT_COLUMNS,
    StreamReceipt,
    listandwatch_stream,
    receipt_of_row,
)


def kubelet_health(raw: str) -> str:
    """The kubelet counts only the exact string "Healthy" as healthy."""
    return HEALTHY if raw == HEALTHY else UNHEALTHY


_devices = table_of(Device)
# What a snapshot needs to know of its stream's devices: plain rows, not ORM objects, which
# cost more CPU to load and to flush than PostgreSQL spends on the rows. Read with the stream's
# receipt (`_RECEIPT_AND_DEVICES`).
_LISTED_DEVICES = select(
    _devices.c.id,
    _devices.c.device_id,
    _devices.c.state,
    _devices.c.health,
    _devices.c.raw_health,
    _devices.c.health_source,
    # As text, decoded once per distinct value (numa_nodes_of): the driver decoding each row's
    # JSON cost about 3% of an 8-device flip's CPU.
    cast(_devices.c.numa_nodes, Text),
    _devices.c.first_seen,
    _devices.c.health_changed_at,
    _devices.c.removed_by_capacity,
    _devices.c.presence_uncertain,
).where(_devices.c.node_id == bindparam("node_id"), _devices.c.resource == bindparam("resource"))
_listed_columns = _LISTED_DEVICES.selected_columns
_receipts = table_of(IngestReceipt)
_nodes = table_of(Node)
# The stream's receipt and its devices in one read, made after the node's row is locked, so
# both are as the last snapshot left them: a row per device with the receipt's columns on
# each, or one row without device columns when the stream has no device.
_STREAM_OF_NODE = select(*RECEIPT_COLUMNS, *_listed_columns).select_from(
    _nodes.outerjoin(
        _receipts,
        and_(_receipts.c.node_id == _nodes.c.id, _receipts.c.stream == bindparam("stream")),
    ).outerjoin(
        _devices,
        and_(_devices.c.node_id == _nodes.c.id, _devices.c.resource == bindparam("resource")),
    )
)
_RECEIPT_AND_DEVICES = _STREAM_OF_NODE.where(_nodes.c.id == bindparam("node_id"))
_RECEIPT_AND_DEVICES_SQL = DriverStatement(_RECEIPT_AND_DEVICES)
# The node's present devices of its other resources, for the per-node device limit when a
# snapshot lists new devices. The state and the resource filter the count, not the scan: as
# conditions of the scan, the planner joined the node's devices with the partial index of
# every present device (20 ms at 130,000 devices, before the table's statistics caught up).
_PRESENT_ELSEWHERE_COUNT = func.count().filter(
    _devices.c.state == PRESENT, _devices.c.resource != bindparam("resource")
)
# The same of the node by its name, not correlated with the read it is a column of, so
# PostgreSQL counts once per statement, not once per row.
_named = _nodes.alias("named")
_PRESENT_ELSEWHERE_OF_NAMED_NODE = (
    select(_PRESENT_ELSEWHERE_COUNT)
    .select_from(_devices.join(_named, _named.c.id == _devices.c.node_id))
    .where(_named.c.name == bindparam("node_name"))
    .correlate(None)
    .scalar_subquery()
)
# The same read by the node's name, for a read sent with the statement that locks the node's
# row, before its id is known; it runs after that statement, so under the lock all the same.
# Each row ends with the count above (`present_elsewhere_of_rows`).
STREAM_OF_NAMED_NODE = DriverStatement(
    _STREAM_OF_NODE.add_columns(_PRESENT_ELSEWHERE_OF_NAMED_NODE).where(
        _nodes.c.name == bindparam("node_name")
    )
)


def read_stream(
    session: Session, node_id: int, snapshot: ListAndWatchSnapshot
) -> tuple[StreamReceipt | None, dict[str, ListedDevice]]:
    """The stream's receipt (None before its first snapshot) and its devices by device ID."""
    parameters = {**stream_parameters(snapshot), "node_id": node_id}
    if session.get_bind().dialect.name == "postgresql":
        rows = _RECEIPT_AND_DEVICES_SQL.execute(session, parameters).all()
    else:
        rows = session.execute(_RECEIPT_AND_DEVICES, parameters).all()
    return stream_of_rows(rows)


def stream_parameters(snapshot: ListAndWatchSnapshot) -> dict[str, Any]:
    """The parameters of the stream's read but for its node."""
    return {"stream": listandwatch_stream(snapshot.resource), "resource": snapshot.resource}


class StreamRow(NamedTuple):
    """A row of the stream's read (`_STREAM_OF_NODE`), named: the receipt's columns, then a
    device's, then, for the read by the node's name (STREAM_OF_NAMED_NODE), the node's
    present devices of its other resources. On the one row of a stream without a receipt,
    or without devices, that part is None throughout: `receipt_id` and `device_row_id`
    tell."""

    receipt_id: int | None
    boot_id: str
    seq: int
    payload_hash: str
    content_hash: str | None
    boot_started_at: datetime | None
    device_row_id: int | None
    device_id: str
    state: str
    health: str
    raw_health: str | None
    health_source: str
    # As text, decoded once per distinct value (numa_nodes_of).
    numa_nodes: str
    first_seen: datetime
    health_changed_at: datetime | None
    removed_by_capacity: bool
    presence_uncertain: bool
    present_elsewhere: int | None = None

    def receipt(self) -> StreamReceipt | None:
        return receipt_of_row(self)

    def device(self) -> ListedDevice | None:
        if self.device_row_id is None:
            return None
        return ListedDevice(
            self.device_row_id,
            self.device_id,
            self.state,
            self.health,
            self.raw_health,
            self.health_source,
            list(numa_nodes_of(self.numa_nodes)),
            in_utc(self.first_seen),
            in_utc(self.health_changed_at),
            self.removed_by_capacity,
            bool(self.presence_uncertain),
        )


def stream_of_rows(
    rows: Sequence[Sequence[Any]],
) -> tuple[StreamReceipt | None, dict[str, ListedDevice]]:
    """`read_stream`'s answer from the rows of its statement."""
    named = [StreamRow(*row) for row in rows]
    receipt = named[0].receipt() if named else None
    devices = {device.device_id: device for row in named if (device := row.device()) is not None}
    return receipt, devices


def present_elsewhere_of_rows(rows: Sequence[Sequence[Any]]) -> int:
    """The node's present devices of its other resources, from the rows of
    STREAM_OF_NAMED_NODE (not empty)."""
    return int(StreamRow(*rows[0]).present_elsewhere or 0)


_PRESENT_ELSEWHERE = select(_PRESENT_ELSEWHERE_COUNT).where(
    _devices.c.node_id == bindparam("node_id")
)
_INSERT_DEVICES = BulkInsertReturning(
    _devices,
    shared=(
        "node_id",
        # Written here, so the row's trigger need not look it up (migration 0014).
        "node_name",
        "resource",
        "health_source",
        "state",
        "first_seen",
        "last_seen",
        "health_changed_at",
    ),
    per_row=("device_id", "health", "raw_health", "numa_nodes"),
    returning=("id", "device_id"),
)
_UPDATE_DEVICES = BulkUpdate(
    _devices,
    columns=(
        "state",
        "health",
        "raw_health",
        "health_source",
        "numa_nodes",
        "last_seen",
        "removed_at",
        "removed_by_capacity",
        "health_changed_at",
        "presence_uncertain",
    ),
)


class ListedDevice(NamedTuple):
    """A device row of the stream, as loaded before the snapshot."""

    id: int
    device_id: str
    state: str
    health: str
    raw_health: str | None
    health_source: str
    numa_nodes: list[Any]
    first_seen: datetime
    health_changed_at: datetime | None
    removed_by_capacity: bool
    presence_uncertain: bool


def replace_device_list(
    session: Session,
    node_id: int,
    snapshot: ListAndWatchSnapshot,
    now: datetime,
    log: EventLog,
    *,
    max_node_devices: int | None = None,
    listed: dict[str, ListedDevice],
    new_node: bool = False,
    after_gap: bool = False,
) -> DeviceChanges:
    """Rows change only where the snapshot changes them: a present device still listed as it
    was is not written at all. Its `last_seen` is not kept current while it is present
    (readers take the node's); it is written when the device leaves, and while a removed
    device is still listed. `listed`: the stream's devices as `read_stream` read them (none
    for a new node); this function changes the dict. `new_node`: this transaction inserted
    the node's row, so the node has no other devices to count. `after_gap`: the service may
    have missed changes before this snapshot (derived health weighs that).

    New devices are inserted here; the changes to the stream's other rows are returned, for
    the caller to write (`write_device_changes`, or `device_changes_write` with the
    transaction's other closing writes)."""
    snapshot, gone, uncertain = _judged(session, node_id, snapshot, listed, log, after_gap)
    changes, new_devices = listed_device_changes(
        node_id, snapshot, now, log, listed, gone, uncertain
    )
    if new_devices:
        if max_node_devices is not None:
            # The snapshot replaces this resource's list; the node's other resources stay.
            elsewhere = (
                0
                if new_node
                else session.execute(
                    _PRESENT_ELSEWHERE, {"node_id": node_id, "resource": snapshot.resource}
                ).scalar_one()
            )
            check_listed_devices_fit(snapshot, elsewhere, max_node_devices)
        pks = {
            row.device_id: row.id for row in _INSERT_DEVICES.execute_returning(session, new_devices)
        }
        where: dict[str, Any] = {"node": snapshot.node, "resource": snapshot.resource}
        for row in new_devices:
            device_id = row["device_id"]
            pk = pks[device_id]
            _device_added_event(log, snapshot, row, pk)
            if device_id in gone:
                changes.append(
                    {"id": pk, "state": REMOVED, "removed_at": now, "removed_by_capacity": True}
                )
                _removed_by_capacity_event(log, device_id, pk, where)
            elif device_id in uncertain:
                changes.append({"id": pk, "presence_uncertain": True})
    return changes


def check_listed_devices_fit(
    snapshot: ListAndWatchSnapshot, elsewhere: int, max_node_devices: int | None
) -> None:
    """Refuse a snapshot whose devices, with the node's `elsewhere` present devices of its other
    resources, are more than one node may have: the snapshot replaces this resource's list."""
    check_device_total(elsewhere + len(snapshot.devices), field="devices", limit=max_node_devices)


# The part of a closing statement that inserts a snapshot's new devices (`new_devices_write`),
# returning their id, resource and device_id: their events find their ids there.
NEW_LISTED_DEVICES = "new_listed_devices"


def new_devices_write(
    snapshot: ListAndWatchSnapshot, new_devices: list[dict[str, Any]], log: EventLog
) -> Write:
    """The insert of `new_devices` (`listed_device_changes`' rows, not empty) on PostgreSQL,
    as the part named NEW_LISTED_DEVICES of a statement of several writes. Their device_added
    events are logged as `replace_device_list` logs them but without an id, which the
    statement's events part finds (`EventLog.written_after(..., new_devices=...)`)."""
    for row in new_devices:
        _device_added_event(log, snapshot, row, None)
    insert = _INSERT_DEVICES.write(new_devices, returning="id, resource, device_id")
    return insert._replace(name=NEW_LISTED_DEVICES)


def _device_added_event(
    log: EventLog, snapshot: ListAndWatchSnapshot, row: dict[str, Any], device_pk: int | None
) -> None:
    _device_event(
        log,
        snapshot,
        "device_added",
        row["device_id"],
        device_pk,
        after={
            "health": row["health"],
            "raw_health": row["raw_health"],
            "numa_nodes": row["numa_nodes"],
        },
    )


def listed_device_changes(
    node_id: int,
    snapshot: ListAndWatchSnapshot,
    now: datetime,
    log: EventLog,
    listed: dict[str, ListedDevice],
    gone: set[str],
    uncertain: AbstractSet[str] = frozenset(),
) -> tuple[DeviceChanges, list[dict[str, Any]]]:
    """`replace_device_list` without a statement: the changes to the stream's rows, with their
    events, and the rows of the devices it does not list yet, to insert (their events come
    with their ids). `gone`: the devices the Node's status counts as gone; `uncertain`: those
    it cannot tell unhealthy from gone."""
    existing = listed
    where: dict[str, Any] = {"node": snapshot.node, "resource": snapshot.resource}
    changes: DeviceChanges = []
    new_devices: list[dict[str, Any]] = []
    for incoming in snapshot.devices:
        health = kubelet_health(incoming.health)
        numa = incoming.topology.numa_ids() if incoming.topology else []
        device = existing.pop(incoming.ID, None)
        if device is None:
            new_devices.append(
                {
                    "node_id": node_id,
                    "node_name": snapshot.node,
                    "resource": snapshot.resource,
                    "health_source": snapshot.health_source,
                    "state": PRESENT,
                    "first_seen": now,
                    "last_seen": now,
                    "health_changed_at": now,
                    "device_id": incoming.ID,
                    "health": health,
                    "raw_health": incoming.health,
                    "numa_nodes": numa,
                }
            )
            continue
        pk = device.id
        change: dict[str, Any] = {}
        state = device.state
        if state != PRESENT:
            # Still listed while removed (by capacity): seen now.
            change["last_seen"] = now
            if incoming.ID not in gone:
                _device_event(
                    log,
                    snapshot,
                    "device_reappeared",
                    incoming.ID,
                    pk,
                    before={"state": state},
                    after={"state": PRESENT},
                )
                state = change["state"] = PRESENT
                change["removed_at"] = None
                change["removed_by_capacity"] = False
        if device.health != health:
            _device_event(
                log,
                snapshot,
                "health_changed",
                incoming.ID,
                pk,
                before={"health": device.health, "raw_health": device.raw_health},
                after={"health": health, "raw_health": incoming.health},
            )
            change["health"] = health
            change["health_changed_at"] = now
        if device.raw_health != incoming.health:
            change["raw_health"] = incoming.health
        if device.health_source != snapshot.health_source:
            change["health_source"] = snapshot.health_source
        if numa and device.numa_nodes != numa:
            _device_event(
                log,
                snapshot,
                "topology_changed",
                incoming.ID,
                pk,
                before={"numa_nodes": device.numa_nodes},
                after={"numa_nodes": numa},
            )
            change["numa_nodes"] = numa
        if device.presence_uncertain != (incoming.ID in uncertain):
            change["presence_uncertain"] = incoming.ID in uncertain
        if incoming.ID in gone:
            change["removed_by_capacity"] = True
            change["last_seen"] = now
            if state == PRESENT:
                change["state"] = REMOVED
                change["removed_at"] = now
                _removed_by_capacity_event(log, incoming.ID, pk, where)
        if change:
            changes.append({"id": pk, **change})
    for device in existing.values():
        if snapshot.health_source == DERIVED:
            # Removed, and not listed (a derived snapshot lists every present device).
            continue
        # Not listed: removed by its stream, whatever the Node's status says from now on.
        if device.state == PRESENT:
            changes.append(
                {
                    "id": device.id,
                    "state": REMOVED,
                    "removed_at": now,
                    "last_seen": now,
                    "removed_by_capacity": False,
                    "presence_uncertain": False,
                }
            )
            _device_event(
                log,
                snapshot,
                "device_removed",
                device.device_id,
                device.id,
                before={"state": PRESENT},
                after={"state": REMOVED},
            )
        elif device.removed_by_capacity or device.presence_uncertain:
            changes.append(
                {"id": device.id, "removed_by_capacity": False, "presence_uncertain": False}
            )
    return changes, new_devices


def _device_event(
    log: EventLog,
    snapshot: ListAndWatchSnapshot,
    kind: str,
    device_id: str,
    device_pk: int | None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> None:
    log.add(
        kind,
        node=snapshot.node,
        resource=snapshot.resource,
        device_id=device_id,
        device_pk=device_pk,
        before=before,
        after=after,
    )


# Changed rows of a stream's devices: each {"id": ..., column: new value, ...}.
DeviceChanges = list[dict[str, Any]]


def write_device_changes(session: Session, changes: DeviceChanges) -> None:
    _UPDATE_DEVICES.execute(session, changes)


def device_changes_write(changes: DeviceChanges) -> Write:
    """`write_device_changes` on PostgreSQL (changes not empty), as a part of a statement of
    several writes."""
    return _UPDATE_DEVICES.write(changes)


def _judged(
    session: Session,
    node_id: int,
    snapshot: ListAndWatchSnapshot,
    existing: dict[str, ListedDevice],
    log: EventLog,
    after_gap: bool,
) -> tuple[ListAndWatchSnapshot, set[str], set[str]]:
    """For a derived snapshot (devicedeck/inventory/write/derived_health.py): the snapshot with
    every present device it leaves out listed as not offered, the devices the rule counts as
    gone, and those it cannot tell; the node's judged observation is stored. Any other snapshot
    is returned as it is, with nothing gone or uncertain."""
    if snapshot.health_source != DERIVED:
        return snapshot, set(), set()
    node = session.execute(
        select(Node.capacity, Node.allocatable, Node.derived_basis).where(Node.id == node_id)
    ).one()
    listed_ids = {incoming.ID for incoming in snapshot.devices}
    offered = {d.ID for d in snapshot.devices if kubelet_health(d.health) == HEALTHY}
    judgement = judge_stored(
        node.derived_basis,
        snapshot.resource,
        known=listed_ids | set(existing),
        offered=offered,
        removed={d.device_id for d in existing.values() if d.state != PRESENT},
        counts=status_counts(node.capacity, node.allocatable, snapshot.resource),
        after_gap=after_gap,
    )
    stored = stored_after(node.derived_basis, snapshot.resource, judgement, log, snapshot.node)
    if stored is not None:
        session.execute(update(Node).where(Node.id == node_id).values(derived_basis=stored))
    forgotten = [
        PluginDevice(ID=d.device_id, health=UNHEALTHY)
        for d in existing.values()
        if d.state == PRESENT and d.device_id not in listed_ids
    ]
    if forgotten:
        snapshot = snapshot.model_copy(update={"devices": [*snapshot.devices, *forgotten]})
    presence = judgement.presence
    return (
        snapshot,
        {d for d, p in presence.items() if p == GONE},
        {d for d, p in presence.items() if p == UNCERTAIN},
    )


def _removed_by_capacity_event(
    log: EventLog, device_id: str, device_pk: int, where: dict[str, Any]
) -> None:
    log.add(
        "device_removed",
        **where,
        device_id=device_id,
        device_pk=device_pk,
        before={"state": PRESENT},
        after={"state": REMOVED, "reason": REMOVED_BY_CAPACITY_REASON},
    )


def mark_removed_by_capacity(device: Device, now: datetime, log: EventLog, **where: Any) -> None:
    """Remove a device its stream still lists, as the Node's status counts it gone."""
    device.removed_by_capacity = True
    if device.state != PRESENT:
        return
    device.state = REMOVED
    device.removed_at = now
    _removed_by_capacity_event(log, device.device_id, device.id, where)


REMOVED_BY_CAPACITY_REASON = "not offered by the kubelet, and not counted in the Node's capacity"


_registrations = table_of(PluginRegistration)
# Every changed snapshot from a tapped plugin carries its registration: plain statements, as
# for the devices.
_FIND_REGISTRATION = select(
    _registrations.c.id,
    _registrations.c.endpoint,
    _registrations.c.api_version,
    _registrations.c.options,
).where(
    _registrations.c.node_id == bindparam("node_id"),
    _registrations.c.resource == bindparam("resource"),
)
_SEEN = bindparam("now", type_=_registrations.c.last_seen.type)
_TOUCH_REGISTRATION = (
    update(_registrations)
    .where(_registrations.c.id == bindparam("registration_id"))
    .values(last_seen=_SEEN)
)
_REGISTRATION_INFO = {
    "endpoint": bindparam("to_endpoint"),
    "api_version": bindparam("to_api_version"),
    # None is stored as JSON null, as the ORM stored it.
    "options": bindparam("to_options", type_=_registrations.c.options.type),
}
_INSERT_REGISTRATION = insert(_registrations).values(
    node_id=bindparam("node_id"),
    resource=bindparam("resource"),
    first_seen=_SEEN,
    last_seen=_SEEN,
    **_REGISTRATION_INFO,
)
_CHANGE_REGISTRATION = (
    update(_registrations)
    .where(_registrations.c.id == bindparam("registration_id"))
    .values(last_seen=_SEEN, **_REGISTRATION_INFO)
)


def record_plugin(
    session: Session,
    node_id: int,
    snapshot: ListAndWatchSnapshot,
    now: datetime,
    log: EventLog,
    *,
    new_node: bool = False,
) -> None:
    """`new_node`: this transaction inserted the node's row, so it has no registration yet."""
    assert snapshot.plugin is not None
    info: dict[str, Any] = {
        "endpoint": snapshot.plugin.endpoint,
        "api_version": snapshot.plugin.version,
        "options": snapshot.plugin.options.model_dump() if snapshot.plugin.options else None,
    }
    stream = {"node_id": node_id, "resource": snapshot.resource}
    new_info = {f"to_{key}": value for key, value in info.items()}
    registration = None if new_node else session.execute(_FIND_REGISTRATION, stream).first()
    where: dict[str, Any] = {"node": snapshot.node, "resource": snapshot.resource}
    if registration is None:
        session.execute(_INSERT_REGISTRATION, {**stream, **new_info, "now": now})
        log.add("plugin_registered", **where, after=info)
        return
    registration_id, endpoint, api_version, options = registration
    before = {"endpoint": endpoint, "api_version": api_version, "options": options}
    if before == info:
        session.execute(_TOUCH_REGISTRATION, {"registration_id": registration_id, "now": now})
        return
    log.add("plugin_changed", **where, before=before, after=info)
    session.execute(
        _CHANGE_REGISTRATION, {"registration_id": registration_id, "now": now, **new_info}
    )
