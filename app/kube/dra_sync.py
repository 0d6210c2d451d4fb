"""DRA objects (resource.k8s.io/v1): ResourceSlices -> dra_devices, ResourceClaims -> dra_claims.

Slices are stored as the API server has them, every generation; readers keep only the highest
pool generation per (driver, pool), as DRA consumers must (see app/inventory/dra_devices.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from app.inventory.cluster_models import DraClaim, DraClaimDevice, DraDevice


def _single_value(value: Any) -> Any:
    """{"string": "a100"} -> "a100": DRA wraps each attribute and capacity in a typed member."""
    if isinstance(value, dict) and len(value) == 1:
        return next(iter(value.values()))
    return value


def slice_devices(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The dra_devices rows of one ResourceSlice."""
    spec = obj.get("spec") or {}
    pool = spec.get("pool") or {}
    common = {
        "slice_name": obj["metadata"]["name"],
        "driver": str(spec.get("driver") or ""),
        "pool": str(pool.get("name") or ""),
        "pool_generation": int(pool.get("generation") or 0),
    }
    rows = []
    names = set()
    for device in spec.get("devices") or []:
        # The API server rejects duplicate names; skipping them keeps one bad object harmless.
        if not device.get("name") or device["name"] in names:
            continue
        names.add(device["name"])
        rows.append(
            {
                **common,
                "device": str(device["name"]),
                # perDeviceNodeSelection puts the node on each device instead of the slice.
                "node": device.get("nodeName") or spec.get("nodeName") or None,
                "attributes": {
                    k: _single_value(v) for k, v in (device.get("attributes") or {}).items()
                },
                "capacity": {
                    k: _single_value(v) for k, v in (device.get("capacity") or {}).items()
                },
                "taints": list(device.get("taints") or []),
            }
        )
    return rows


COMPARED = ("driver", "pool", "pool_generation", "node", "attributes", "capacity", "taints")


def apply_slice(session: Session, obj: dict[str, Any], now: datetime) -> None:
    """Bring the stored devices of one slice in line with it, touching only what changed."""
    name = obj["metadata"]["name"]
    existing = {
        d.device: d
        for d in session.scalars(
            select(DraDevice).where(DraDevice.slice_name == name).order_by(DraDevice.id)
        )
    }
    new_rows = []
    for row in slice_devices(obj):
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


def apply_slice_event(
    session: Session, event_type: str, obj: dict[str, Any], now: datetime
) -> None:
    if event_type == "DELETED":
        session.execute(delete(DraDevice).where(DraDevice.slice_name == obj["metadata"]["name"]))
    else:
        apply_slice(session, obj, now)


def apply_slice_list(session: Session, items: list[dict[str, Any]], now: datetime) -> None:
    names = {obj["metadata"]["name"] for obj in items}
    for obj in items:
        apply_slice(session, obj, now)
    stored = set(session.scalars(select(DraDevice.slice_name).distinct()))
    gone = sorted(stored - names)
    if gone:
        session.execute(delete(DraDevice).where(DraDevice.slice_name.in_(gone)))


def claim_results(obj: dict[str, Any]) -> list[dict[str, Any]]:
    allocation = (obj.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return [
        {
            "request": str(r.get("request") or ""),
            "driver": str(r.get("driver") or ""),
            "pool": str(r.get("pool") or ""),
            "device": str(r.get("device") or ""),
            "share_id": r.get("shareID"),
        }
        for r in results
        if r.get("device")
    ]


def claim_consumers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"resource": r.get("resource"), "name": r.get("name"), "uid": r.get("uid")}
        for r in (obj.get("status") or {}).get("reservedFor") or []
    ]


def apply_claim(session: Session, obj: dict[str, Any], now: datetime) -> None:
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
            {
                "request": d.request,
                "driver": d.driver,
                "pool": d.pool,
                "device": d.device,
                "share_id": d.share_id,
            }
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
    else:
        apply_claim(session, obj, now)


def apply_claim_list(session: Session, items: list[dict[str, Any]], now: datetime) -> None:
    uids = {obj["metadata"]["uid"] for obj in items}
    for obj in items:
        apply_claim(session, obj, now)
    gone = sorted(set(session.scalars(select(DraClaim.uid))) - uids)
    if gone:
        delete_claims(session, gone)
