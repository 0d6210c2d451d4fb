"""A PodResources snapshot's device-plugin side on PostgreSQL: one statement reads what the
snapshot replaces, one writes what it changes.

Statement by statement, a new node's snapshot took five round trips here (devices, current
allocations, new devices, new allocations, allocatable sets), and each cost more of the
service's CPU, in SQLAlchemy and the driver, than the database spent on it. SQLite keeps the
statement-at-a-time path in app/inventory/allocations.py, which decides the same changes.

Both statements are fixed SQL text run with `exec_driver_sql`: no SQLAlchemy expression to
compile or type to process, while errors are still SQLAlchemy's (a database that went away
answers 503) and the statements still go through the engine's events. Parameters are the
driver's own: JSON arrays as `Jsonb`, lists as arrays.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb
from sqlalchemy.orm import Session

from app.inventory.allocations import (
    AllocationChanges,
    CurrentAllocation,
    HeldDevice,
    NodeHoldings,
    allocatable_rows,
    holdings_of,
)
from app.inventory.fields import PRESENT, UNKNOWN
from app.inventory.receipts import listandwatch_stream

# Each part by its node index, as the statement-at-a-time reads do (see allocations.py on the
# join that was tried). The rows come back as JSON arrays in one row: for a node's hundred-odd
# rows that costs less than a result row each.
_READ_HOLDINGS = (
    "SELECT"
    " (SELECT json_agg(json_build_array(d.id, d.resource, d.device_id, d.health, d.state))"
    "  FROM devices d WHERE d.node_id = %(node_id)s"
    f"  AND (d.resource = ANY(%(resources)s) OR d.state = '{PRESENT}')),"
    " (SELECT json_agg(json_build_array(a.id, a.namespace, a.pod, a.pod_uid, a.container,"
    "   a.resource, a.device_id, a.device_pk, a.started))"
    "  FROM allocations a WHERE a.node_id = %(node_id)s AND a.ended IS NULL),"
    " EXISTS (SELECT FROM claim_allocations c WHERE c.node_id = %(node_id)s AND c.ended IS NULL)"
)


def read_holdings_at_once(session: Session, node_id: int, resources: set[str]) -> NodeHoldings:
    """The node's holdings, and whether it holds DRA claims now, in one statement."""
    devices, allocations, claims_open = (
        session.connection()
        .exec_driver_sql(_READ_HOLDINGS, {"node_id": node_id, "resources": sorted(resources)})
        .one()
    )
    return holdings_of(
        devices or (),
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
            for id, namespace, pod, uid, container, resource, device_id, pk, started in allocations
            or ()
        ),
        resources,
        bool(claims_open),
    )


# The parts of the write, each a CTE run only when the snapshot needs it. Data-modifying CTEs
# run once whether or not anything refers to them, and the foreign key from an allocation to
# a device inserted beside it is checked at the end of the statement.
_NEW_DEVICES = (
    "new_devices AS (INSERT INTO devices (node_id, health, health_source, state, first_seen,"
    " last_seen, resource, device_id, numa_nodes)"
    f" SELECT %(node_id)s, '{UNKNOWN}', 'unknown', '{PRESENT}', %(now)s, %(now)s,"
    " r.resource, r.device_id, r.numa_nodes"
    " FROM jsonb_to_recordset(%(devices)s)"
    " AS r(resource varchar, device_id varchar, numa_nodes json)"
    " RETURNING id, resource, device_id),"
    # Another stream's rows: its next snapshot must be applied in full.
    " forgotten AS (UPDATE ingest_receipts SET content_hash = NULL WHERE node_id = %(node_id)s"
    f" AND stream IN (SELECT DISTINCT '{listandwatch_stream('')}' || resource FROM new_devices))"
)
_ENDED = "ended AS (UPDATE allocations SET ended = %(now)s WHERE id = ANY(%(ended)s))"
_STARTED = (
    "started AS (INSERT INTO allocations (node_id, started, device_pk, namespace, pod, pod_uid,"
    " container, resource, device_id)"
    " SELECT %(node_id)s, %(now)s, {device_pk}, r.namespace, r.pod, r.pod_uid, r.container,"
    " r.resource, r.device_id FROM jsonb_to_recordset(%(allocations)s) AS r(device_pk bigint,"
    " namespace varchar, pod varchar, pod_uid varchar, container varchar, resource varchar,"
    " device_id varchar){join})"
)
_STARTED_ON_KNOWN_DEVICES = _STARTED.format(device_pk="r.device_pk", join="")
_STARTED_ON_ANY_DEVICES = _STARTED.format(
    device_pk="coalesce(r.device_pk, n.id)",
    join=" LEFT JOIN new_devices n ON n.resource = r.resource AND n.device_id = r.device_id",
)
# Only what differs from what is stored is written: a set the snapshot no longer lists is
# deleted, a new or changed one written; an unchanged set, the common case, is left alone (its
# updated_at is when it last changed).
_ALLOCATABLE = (
    "sets AS (SELECT r.resource, r.ids FROM jsonb_to_recordset(%(sets)s)"
    " AS r(resource varchar, ids jsonb)),"
    " dropped AS (DELETE FROM node_resources n WHERE n.node_id = %(node_id)s"
    " AND n.resource NOT IN (SELECT resource FROM sets)),"
    " allocatable AS (INSERT INTO node_resources (node_id, resource, allocatable_device_ids,"
    " updated_at) SELECT %(node_id)s, resource, ids::json, %(now)s FROM sets"
    " ON CONFLICT (node_id, resource) DO UPDATE"
    " SET allocatable_device_ids = excluded.allocatable_device_ids,"
    " updated_at = excluded.updated_at"
    " WHERE node_resources.allocatable_device_ids::jsonb"
    " <> excluded.allocatable_device_ids::jsonb)"
)
_SET_POD_UIDS = (
    "uids AS (UPDATE allocations a SET pod_uid = u.uid"
    " FROM jsonb_to_recordset(%(uids)s) AS u(id bigint, uid varchar) WHERE a.id = u.id)"
)

# (new devices, ended, learned UIDs, started, allocatable) -> the statement for those parts.
_Parts = tuple[bool, bool, bool, bool, bool]
_written: dict[_Parts, str] = {}


def _write_statement(parts: _Parts) -> str:
    statement = _written.get(parts)
    if statement is None:
        devices, ended, uids, started, allocatable = parts
        ctes = []
        if devices:
            ctes.append(_NEW_DEVICES)
        if ended:
            ctes.append(_ENDED)
        if uids:
            # The allocations whose UID is learned stay current: no row is also ended here.
            ctes.append(_SET_POD_UIDS)
        if started:
            ctes.append(_STARTED_ON_ANY_DEVICES if devices else _STARTED_ON_KNOWN_DEVICES)
        if allocatable:
            ctes.append(_ALLOCATABLE)
        answer = "SELECT id, resource, device_id FROM new_devices" if devices else "SELECT 1"
        statement = "WITH " + ", ".join(ctes) + " " + answer
        _written[parts] = statement
    return statement


def write_changes_at_once(
    session: Session,
    node_id: int,
    changes: AllocationChanges,
    allocatable: dict[str, set[str]] | None,
    now: datetime,
) -> dict[tuple[str, str], HeldDevice]:
    """Write `changes` and the node's allocatable sets (None: the snapshot has none) in one
    statement; the devices created, by (resource, device ID)."""
    parts = (
        bool(changes.new_devices),
        bool(changes.ended),
        bool(changes.learned_uids),
        bool(changes.started),
        allocatable is not None,
    )
    if not any(parts):
        return {}
    parameters: dict[str, Any] = {"node_id": node_id, "now": now}
    if changes.new_devices:
        parameters["devices"] = Jsonb(
            [
                {
                    "resource": row["resource"],
                    "device_id": row["device_id"],
                    "numa_nodes": row["numa_nodes"],
                }
                for row in changes.new_devices
            ]
        )
    if changes.ended:
        parameters["ended"] = changes.ended_ids()
    if changes.learned_uids:
        parameters["uids"] = Jsonb(
            [{"id": row["allocation_id"], "uid": row["uid"]} for row in changes.learned_uids]
        )
    if changes.started:
        # A key left out of a JSON row (a None value) arrives as NULL.
        parameters["allocations"] = Jsonb(
            [
                {key: row[key] for key in _STARTED_KEYS if row[key] is not None}
                for row in changes.started
            ]
        )
    if allocatable is not None:
        parameters["sets"] = Jsonb(allocatable_rows(allocatable))
    result = session.connection().exec_driver_sql(_write_statement(parts), parameters)
    if not changes.new_devices:
        return {}
    return {(resource, device_id): HeldDevice(pk, UNKNOWN) for pk, resource, device_id in result}


_STARTED_KEYS = ("device_pk", "namespace", "pod", "pod_uid", "container", "resource", "device_id")
