"""A PodResources snapshot's device-plugin side on PostgreSQL: one statement reads what the
snapshot replaces; what it changes is written by the statement that also writes the snapshot's
receipt and events.

Statement by statement, a new node's snapshot took five round trips here (devices, current
allocations, new devices, new allocations, allocatable sets), and each cost more of the
service's CPU, in SQLAlchemy and the driver, than the database spent on it. SQLite keeps the
statement-at-a-time path in devicedeck/inventory/write/allocations.py, which decides the same
changes.

The read is fixed SQL text run with `exec_driver_sql`: no SQLAlchemy expression to compile or
type to process, while errors are still SQLAlchemy's (a database that went away answers 503)
and the statement still goes through the engine's events. Its parameters are the driver's own.
The writes are parts of `write_together`'s statement (devicedeck/inventory/write/bulk.py): the
ids of the devices a snapshot creates are found there, by the allocations it starts and by the
events.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import bindparam
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from devicedeck.inventory.events import EventLog
from devicedeck.inventory.fields import PRESENT, UNKNOWN
from devicedeck.inventory.write.allocations import (
    AllocationChanges,
    CurrentAllocation,
    NodeHoldings,
    PodsListed,
    allocatable_rows,
    holdings_of,
    log_allocation_changes,
)
from devicedeck.inventory.write.bulk import Write
from devicedeck.inventory.write.receipts import StreamReceipt, listandwatch_stream, receipt_of_row

# The stream's receipt, and, only when the snapshot's content is not the one it last applied,
# the holdings the snapshot replaces: each part by its node index, as the statement-at-a-time
# reads do (see allocations.py on the join that was tried). The rows come back as JSON arrays
# in one row: for a node's hundred-odd rows that costs less than a result row each. `{node}`
# is the node's id, or the SQL that finds it.
_RECEIPT_AND_HOLDINGS = (
    "SELECT r.id, r.boot_id, r.seq, r.payload_hash, r.content_hash, r.boot_started_at,"
    " h.devices, h.allocations, h.claims_open, h.ended_pods"
    " FROM (SELECT) AS one"
    " LEFT JOIN ingest_receipts r ON r.node_id = {node} AND r.stream = %(stream)s"
    " LEFT JOIN LATERAL (SELECT"
    " (SELECT json_agg(json_build_array(d.id, d.resource, d.device_id, d.health, d.state))"
    "  FROM devices d WHERE d.node_id = {node}"
    f"  AND (d.resource = ANY(%(resources)s) OR d.state = '{PRESENT}')) AS devices,"
    " (SELECT json_agg(json_build_array(a.id, a.namespace, a.pod, a.pod_uid, a.container,"
    "   a.resource, a.device_id, a.device_pk, a.started))"
    "  FROM allocations a WHERE a.node_id = {node} AND a.ended IS NULL) AS allocations,"
    " EXISTS (SELECT FROM claim_allocations c WHERE c.node_id = {node} AND c.ended IS NULL)"
    " AS claims_open,"
    # `read_ended_pods` in allocations.py, for the pods the snapshot lists holding devices.
    " (SELECT json_agg(json_build_array(k.namespace, k.name, k.uid) ORDER BY k.id)"
    "  FROM unnest(%(pod_namespaces)s::text[], %(pod_names)s::text[]) AS p(namespace, name)"
    "  JOIN kube_pods k ON k.namespace = p.namespace AND k.name = p.name"
    "  WHERE k.node = (SELECT n.name FROM nodes n WHERE n.id = {node})"
    "  AND k.deleted_at IS NOT NULL"
    "  AND NOT EXISTS (SELECT FROM kube_pods l WHERE l.namespace = k.namespace"
    "   AND l.name = k.name AND l.node = k.node AND l.deleted_at IS NULL)) AS ended_pods"
    " WHERE r.content_hash IS DISTINCT FROM %(content_hash)s) AS h ON true"
)
_READ_RECEIPT_AND_HOLDINGS = _RECEIPT_AND_HOLDINGS.format(node="%(node_id)s")
# The same for the node of a name, for a transaction that locks the node's row, or inserts
# it, in the statement before: it reads under that lock, and finds the row it inserted.
READ_RECEIPT_AND_HOLDINGS_OF_NAMED_NODE = _RECEIPT_AND_HOLDINGS.format(
    node="(SELECT n.id FROM nodes n WHERE n.name = %(node_name)s)"
)


def read_receipt_and_holdings(
    session: Session, node_id: int, stream: str, content_hash: str, listed: PodsListed
) -> tuple[StreamReceipt | None, NodeHoldings | None]:
    """The stream's receipt (None before its first snapshot) and, unless the receipt says the
    content is unchanged, the node's holdings and whether it holds DRA claims now."""
    resources = listed.resources
    parameters = {
        "node_id": node_id,
        **receipt_and_holdings_parameters(stream, content_hash, listed),
    }
    row = session.connection().exec_driver_sql(_READ_RECEIPT_AND_HOLDINGS, parameters).one()
    return receipt_and_holdings_of(row, resources)


def receipt_and_holdings_parameters(
    stream: str, content_hash: str, listed: PodsListed
) -> dict[str, Any]:
    """The read's parameters but for the node."""
    pods = listed.pods_holding()
    return {
        "stream": stream,
        "content_hash": content_hash,
        "resources": sorted(listed.resources),
        "pod_namespaces": [namespace for namespace, _ in pods],
        "pod_names": [name for _, name in pods],
    }


class ReceiptAndHoldingsRow(NamedTuple):
    """The one row of `_RECEIPT_AND_HOLDINGS`, named: the receipt's columns (None throughout
    before the stream's first snapshot), then the holdings, each part a JSON array of arrays
    (None throughout when the receipt's content is the snapshot's)."""

    receipt_id: int | None
    boot_id: str
    seq: int
    payload_hash: str
    content_hash: str | None
    boot_started_at: datetime | None
    devices: list[list[Any]] | None
    allocations: list[list[Any]] | None
    claims_open: bool | None
    ended_pods: list[list[Any]] | None


def receipt_and_holdings_of(
    read: Sequence[Any], resources: set[str]
) -> tuple[StreamReceipt | None, NodeHoldings | None]:
    """`read_receipt_and_holdings`' answer, from the read's row."""
    row = ReceiptAndHoldingsRow(*read)
    receipt = receipt_of_row(row)
    if row.claims_open is None:
        return receipt, None
    return receipt, holdings_of(
        row.devices or (),
        (
            # JSON has no time type: `started` comes as PostgreSQL's ISO 8601 text.
            CurrentAllocation(
                id,
                namespace,
                pod,
                uid,
                container,
                resource,
                device_id,
                pk,
                datetime.fromisoformat(started),
            )
            for id, namespace, pod, uid, container, resource, device_id, pk, started in (
                row.allocations or ()
            )
        ),
        resources,
        row.claims_open,
        row.ended_pods or (),
    )


# The parts of the write, each a part of the statement that also writes the snapshot's receipt
# and events (`write_together` in inventory/write/bulk.py), and only when the snapshot needs it.
# Data-modifying parts run once whether or not anything reads them, and the foreign key from
# an allocation to a device inserted beside it is checked at the end of the statement.
NEW_DEVICES = "new_devices"
_JSON = postgresql.JSONB
_NEW_DEVICE_ROWS = bindparam("new_device_rows", type_=_JSON)
_INSERT_NEW_DEVICES = (
    "INSERT INTO devices (node_id, node_name, health, health_source, state, first_seen,"
    " last_seen, resource, device_id, numa_nodes)"
    # The name read once for all rows, so the row's trigger need not (migration 0014).
    " SELECT :holder_node, (SELECT name FROM nodes WHERE id = :holder_node),"
    f" '{UNKNOWN}', 'unknown', '{PRESENT}', :changed_at, :changed_at,"
    " r.resource, r.device_id, r.numa_nodes"
    " FROM jsonb_to_recordset(:new_device_rows)"
    " AS r(resource varchar, device_id varchar, numa_nodes json)"
    " RETURNING id, resource, device_id"
)
# Another stream's rows: its next snapshot must be applied in full.
_FORGET_THEIR_STREAMS = (
    "UPDATE ingest_receipts SET content_hash = NULL WHERE node_id = :holder_node AND stream IN"
    f" (SELECT DISTINCT '{listandwatch_stream('')}' || resource FROM {NEW_DEVICES})"
)
_END = "UPDATE allocations SET ended = :changed_at WHERE id = ANY(:ended_ids)"
_LEARNED_UIDS = bindparam("learned_uids", type_=_JSON)
# The allocations whose UID is learned stay current: no row is also ended here.
_SET_POD_UIDS = (
    "UPDATE allocations a SET pod_uid = u.uid"
    " FROM jsonb_to_recordset(:learned_uids) AS u(id bigint, uid varchar) WHERE a.id = u.id"
)
_STARTED_ROWS = bindparam("started_rows", type_=_JSON)
_START = (
    "INSERT INTO allocations (node_id, started, device_pk, namespace, pod, pod_uid,"
    " container, resource, device_id)"
    " SELECT :holder_node, :changed_at, {device_pk}, r.namespace, r.pod, r.pod_uid, r.container,"
    " r.resource, r.device_id FROM jsonb_to_recordset(:started_rows) AS r(device_pk bigint,"
    " namespace varchar, pod varchar, pod_uid varchar, container varchar, resource varchar,"
    " device_id varchar){join}"
)
_START_ON_KNOWN_DEVICES = _START.format(device_pk="r.device_pk", join="")
_START_ON_ANY_DEVICES = _START.format(
    device_pk="coalesce(r.device_pk, n.id)",
    join=f" LEFT JOIN {NEW_DEVICES} n ON n.resource = r.resource AND n.device_id = r.device_id",
)
# Only what differs from what is stored is written: a set the snapshot no longer lists is
# deleted, a new or changed one written; an unchanged set, the common case, is left alone (its
# updated_at is when it last changed).
_SETS = bindparam("allocatable_sets", type_=_JSON)
_DROP_UNLISTED_SETS = (
    "DELETE FROM node_resources n WHERE n.node_id = :holder_node AND n.resource NOT IN"
    " (SELECT r.resource FROM jsonb_to_recordset(:allocatable_sets) AS r(resource varchar))"
)
_WRITE_SETS = (
    "INSERT INTO node_resources (node_id, resource, allocatable_device_ids, updated_at)"
    " SELECT :holder_node, r.resource, r.ids::json, :changed_at"
    " FROM jsonb_to_recordset(:allocatable_sets) AS r(resource varchar, ids jsonb)"
    " ON CONFLICT (node_id, resource) DO UPDATE"
    " SET allocatable_device_ids = excluded.allocatable_device_ids,"
    " updated_at = excluded.updated_at"
    " WHERE node_resources.allocatable_device_ids::jsonb"
    " <> excluded.allocatable_device_ids::jsonb"
)


def writes_replacing_holdings(
    node_id: int,
    node_name: str,
    listed: PodsListed,
    holdings: NodeHoldings,
    now: datetime,
    log: EventLog,
    *,
    max_node_devices: int | None,
) -> list[Write]:
    """What is `listed` replaces the node's `holdings`: the changes' events, logged, and their
    writes (`changes_writes`), returned."""
    changes = listed.changes(node_id, holdings, now, max_node_devices=max_node_devices)
    log_allocation_changes(changes, node_name, holdings.devices, log)
    return changes_writes(node_id, changes, listed.allocatable, now)


def new_devices_part(writes: Sequence[Write]) -> str | None:
    """The name of the part of `writes` that inserts devices, if one does."""
    return NEW_DEVICES if any(write.name == NEW_DEVICES for write in writes) else None


def changes_writes(
    node_id: int,
    changes: AllocationChanges,
    allocatable: dict[str, set[str]] | None,
    now: datetime,
) -> list[Write]:
    """`changes` and the node's allocatable sets (None: the snapshot has none) as parts of
    one statement; the devices created are its part named NEW_DEVICES."""
    on_node = {"holder_node": node_id, "changed_at": now}
    writes = []
    if changes.new_devices:
        rows = [
            {
                "resource": row["resource"],
                "device_id": row["device_id"],
                "numa_nodes": row["numa_nodes"],
            }
            for row in changes.new_devices
        ]
        writes.append(
            Write(
                _INSERT_NEW_DEVICES,
                (_NEW_DEVICE_ROWS,),
                {**on_node, "new_device_rows": rows},
                name=NEW_DEVICES,
            )
        )
        writes.append(Write(_FORGET_THEIR_STREAMS, (), on_node))
    if changes.ended:
        writes.append(Write(_END, (), {**on_node, "ended_ids": changes.ended_ids()}))
    if changes.learned_uids:
        uids = [{"id": row["allocation_id"], "uid": row["uid"]} for row in changes.learned_uids]
        writes.append(Write(_SET_POD_UIDS, (_LEARNED_UIDS,), {"learned_uids": uids}))
    if changes.started:
        # A key left out of a JSON row (a None value) arrives as NULL.
        started = [
            {key: row[key] for key in _STARTED_KEYS if row[key] is not None}
            for row in changes.started
        ]
        sql = _START_ON_ANY_DEVICES if changes.new_devices else _START_ON_KNOWN_DEVICES
        writes.append(Write(sql, (_STARTED_ROWS,), {**on_node, "started_rows": started}))
    if allocatable is not None:
        sets = {**on_node, "allocatable_sets": allocatable_rows(allocatable)}
        writes.append(Write(_DROP_UNLISTED_SETS, (), sets))
        writes.append(Write(_WRITE_SETS, (_SETS,), sets))
    return writes


_STARTED_KEYS = ("device_pk", "namespace", "pod", "pod_uid", "container", "resource", "device_id")
