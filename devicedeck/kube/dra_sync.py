"""DRA objects (resource.k8s.io, any served version) -> dra_slices, dra_devices, dra_claims.

Slices are stored as the API server has them, every generation, and empty ones too; readers
keep only the highest generation of each pool, as DRA consumers must (inventory/dra/devices.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from devicedeck.inventory.cluster.models import DraClaim, DraClaimDevice, DraDevice, DraSlice
from devicedeck.inventory.events import EventLog
from devicedeck.kube import dra_objects
from devicedeck.kube.dra_health import apply_claim_conditions
from devicedeck.kube.node_sync import ACTOR


def slice_fields(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec") or {}
    pool = spec.get("pool") or {}
    return {
        "driver": str(spec.get("driver") or ""),
        "pool": str(pool.get("name") or ""),
        "generation": int(pool.get("generation") or 0),
        "slice_count": int(pool.get("resourceSliceCount") or 1),
        "node": spec.get("nodeName") or None,
    }


def slice_devices(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The dra_devices rows of one ResourceSlice."""
    spec = obj.get("spec") or {}
    fields = slice_fields(obj)
    common = {
        "slice_name": obj["metadata"]["name"],
        "driver": fields["driver"],
        "pool": fields["pool"],
        "pool_generation": fields["generation"],
    }
    rows = []
    names = set()
    for raw in spec.get("devices") or []:
        device = dra_objects.device_fields(raw)
        # The API server rejects duplicate names; skipping them keeps one bad object harmless.
        if not device.get("name") or device["name"] in names:
            continue
        names.add(device["name"])
        rows.append(
            {
                **common,
                "device": str(device["name"]),
                **dra_objects.node_selection(spec, device),
                "attributes": dra_objects.attributes(device),
                "capacity": dra_objects.capacity(device),
                "taints": list(device.get("taints") or []),
                "allow_multiple": bool(device.get("allowMultipleAllocations")),
            }
        )
    return rows


COMPARED = (
    "driver",
    "pool",
    "pool_generation",
    "node",
    "all_nodes",
    "node_selector",
    "attributes",
    "capacity",
    "taints",
    "allow_multiple",
)


def _store_slice(session: Session, obj: dict[str, Any], devices: int, now: datetime) -> None:
    name = obj["metadata"]["name"]
    fields = {**slice_fields(obj), "devices": devices}
    stored = session.scalars(select(DraSlice).where(DraSlice.name == name)).one_or_none()
    if stored is None:
        session.add(DraSlice(name=name, updated_at=now, **fields))
    elif any(getattr(stored, key) != value for key, value in fields.items()):
        for key, value in fields.items():
            setattr(stored, key, value)
        stored.updated_at = now


def apply_slice(session: Session, obj: dict[str, Any], now: datetime) -> None:
    """Bring the stored slice and its devices in line with it, touching only what changed."""
    name = obj["metadata"]["name"]
    existing = {
        d.device: d
        for d in session.scalars(
            select(DraDevice).where(DraDevice.slice_name == name).order_by(DraDevice.id)
        )
    }
    rows = slice_devices(obj)
    _store_slice(session, obj, len(rows), now)
    new_rows = []
    for row in rows:
        device = existing.pop(row["device"], None)
        if device is None:
            new_rows.append({**row, "updated_at": now})
        elif any(getattr(device, key) != row[key] for key in COMPARED):
            for key in COMPARED:
                setattr(device, key, row[key])
            device.updated_at = now
    for device in existing.values():
        session.delete(device)
    if new_rows:
        session.execute(insert(DraDevice), new_rows)


def delete_slices(session: Session, names: list[str]) -> None:
    session.execute(delete(DraDevice).where(DraDevice.slice_name.in_(names)))
    session.execute(delete(DraSlice).where(DraSlice.name.in_(names)))


def apply_slice_event(
    session: Session, event_type: str, obj: dict[str, Any], now: datetime
) -> None:
    if event_type == "DELETED":
        delete_slices(session, [obj["metadata"]["name"]])
    else:
        apply_slice(session, obj, now)


def apply_slice_list(session: Session, items: list[dict[str, Any]], now: datetime) -> None:
    names = {obj["metadata"]["name"] for obj in items}
    for obj in items:
        apply_slice(session, obj, now)
    stored = set(session.scalars(select(DraDevice.slice_name).distinct()))
    stored |= set(session.scalars(select(DraSlice.name)))
    gone = sorted(stored - names)
    if gone:
        delete_slices(session, gone)


RESULT_FIELDS = (
    "request",
    "driver",
    "pool",
    "device",
    "share_id",
    "admin_access",
    "consumed_capacity",
    "conditions",
)


def claim_results(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The claim's allocation results, each with the conditions its driver reported for that
    device (status.devices is keyed by driver, pool, device and shareID)."""
    status = obj.get("status") or {}
    allocation = status.get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    conditions = {
        (d.get("driver"), d.get("pool"), d.get("device"), d.get("shareID")): d.get("conditions")
        for d in status.get("devices") or []
    }
    rows = []
    for r in results:
        if not r.get("device"):
            continue
        key = (r.get("driver"), r.get("pool"), r.get("device"), r.get("shareID"))
        consumed = r.get("consumedCapacity")
        found = conditions.get(key)
        rows.append(
            {
                "request": str(r.get("request") or ""),
                "driver": str(r.get("driver") or ""),
                "pool": str(r.get("pool") or ""),
                "device": str(r.get("device") or ""),
                "share_id": r.get("shareID"),
                "admin_access": bool(r.get("adminAccess")),
                "consumed_capacity": (
                    {k: str(v) for k, v in consumed.items()} if isinstance(consumed, dict) else None
                ),
                "conditions": list(found) if isinstance(found, list) else None,
            }
        )
    return rows


def claim_consumers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"resource": r.get("resource"), "name": r.get("name"), "uid": r.get("uid")}
        for r in (obj.get("status") or {}).get("reservedFor") or []
    ]


def apply_claim(session: Session, obj: dict[str, Any], now: datetime, log: EventLog) -> None:
    metadata = obj["metadata"]
    results = claim_results(obj)
    fields = {
        "namespace": metadata["namespace"],
        "name": metadata["name"],
        "allocated": bool((obj.get("status") or {}).get("allocation")),
        "reserved_for": claim_consumers(obj),
    }
    claim = session.scalars(select(DraClaim).where(DraClaim.uid == metadata["uid"])).one_or_none()
    if claim is None:
        claim = DraClaim(uid=metadata["uid"], updated_at=now, **fields)
        session.add(claim)
        session.flush()
        stored: list[dict[str, Any]] = []
    else:
        if any(getattr(claim, key) != value for key, value in fields.items()):
            for key, value in fields.items():
                setattr(claim, key, value)
            claim.updated_at = now
        stored = [
            {key: getattr(d, key) for key in RESULT_FIELDS}
            for d in session.scalars(
                select(DraClaimDevice)
                .where(DraClaimDevice.claim_id == claim.id)
                .order_by(DraClaimDevice.id)
            )
        ]
    if stored == results:
        return
    session.execute(delete(DraClaimDevice).where(DraClaimDevice.claim_id == claim.id))
    if results:
        session.execute(insert(DraClaimDevice), [{"claim_id": claim.id, **r} for r in results])
    claim.updated_at = now
    apply_claim_conditions(session, f"{claim.namespace}/{claim.name}", results, now, log)


def delete_claims(session: Session, uids: list[str]) -> None:
    # Claim devices go with their claim (ON DELETE CASCADE needs SQLite's foreign_keys pragma,
    # which the engine sets; deleting them first keeps this independent of it).
    ids = select(DraClaim.id).where(DraClaim.uid.in_(uids))
    session.execute(delete(DraClaimDevice).where(DraClaimDevice.claim_id.in_(ids)))
    session.execute(delete(DraClaim).where(DraClaim.uid.in_(uids)))


def apply_claim_event(
    session: Session, event_type: str, obj: dict[str, Any], now: datetime
) -> None:
    if event_type == "DELETED":
        delete_claims(session, [obj["metadata"]["uid"]])
        return
    log = EventLog(at=now, actor=ACTOR)
    apply_claim(session, obj, now, log)
    log.write(session)


def apply_claim_list(session: Session, items: list[dict[str, Any]], now: datetime) -> None:
    uids = {obj["metadata"]["uid"] for obj in items}
    log = EventLog(at=now, actor=ACTOR)
    for obj in items:
        apply_claim(session, obj, now, log)
    log.write(session)
    gone = sorted(set(session.scalars(select(DraClaim.uid))) - uids)
    if gone:
        delete_claims(session, gone)
