"""The DRA side of pods: their claims by real name, who else uses them, and their devices."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from devicedeck.inventory.cluster.models import DraClaim, DraClaimDevice, KubePod
from devicedeck.inventory.dra.history import HEALTH_EVENT as DRA_HEALTH_EVENT
from devicedeck.inventory.dra.history import dra_device_id
from devicedeck.inventory.dra.summary import health_by_device
from devicedeck.inventory.fields import UNHEALTHY
from devicedeck.inventory.models import Event
from devicedeck.inventory.read.health_spans import EVENT_LIMIT, HealthChange, health_during


def _references(pod: KubePod) -> list[dict[str, Any]]:
    # Rows written before claims were resolved hold bare reference names.
    return [
        c if isinstance(c, dict) else {"name": c, "claim": None, "template": None}
        for c in pod.claims
    ]


def pods_dra(session: Session, pods: list[KubePod]) -> dict[str, dict[str, Any]]:
    """uid -> {"claims": [...], "dra_devices": [...]} for each pod."""
    wanted = sorted(
        {(p.namespace, c["claim"]) for p in pods for c in _references(p) if c.get("claim")}
    )
    claims: dict[tuple[str, str], DraClaim] = {}
    results: dict[int, list[DraClaimDevice]] = {}
    if wanted:
        for row in session.scalars(
            select(DraClaim)
            .where(tuple_(DraClaim.namespace, DraClaim.name).in_(wanted))
            .order_by(DraClaim.id)
        ):
            claims[(row.namespace, row.name)] = row
            results[row.id] = []
        if results:
            for result in session.scalars(
                select(DraClaimDevice)
                .where(DraClaimDevice.claim_id.in_(sorted(results)))
                .order_by(DraClaimDevice.id)
            ):
                results[result.claim_id].append(result)
    keys = sorted({(r.driver, r.pool, r.device) for rows in results.values() for r in rows})
    health = health_by_device(session, keys)
    found: dict[str, dict[str, Any]] = {}
    for pod in pods:
        refs = []
        devices = []
        for ref in _references(pod):
            claim = claims.get((pod.namespace, ref["claim"])) if ref.get("claim") else None
            others = (
                sorted(
                    str(c.get("name"))
                    for c in claim.reserved_for
                    if c.get("uid") != pod.uid and c.get("name")
                )
                if claim is not None
                else []
            )
            refs.append({**ref, "shared_with": others})
            for result in results.get(claim.id, []) if claim is not None else []:
                key = (result.driver, result.pool, result.device)
                devices.append(
                    {
                        "claim": claim.name if claim is not None else "",
                        "request": result.request,
                        "driver": result.driver,
                        "pool": result.pool,
                        "device": result.device,
                        "share_id": result.share_id,
                        "admin_access": result.admin_access,
                        "health": (health.get(key) or {}).get("health"),
                    }
                )
        found[pod.uid] = {"claims": refs, "dra_devices": devices}
    return found


def latest_pod(session: Session, namespace: str, name: str) -> KubePod | None:
    """The pod with this name as the API server has it: the live one, else the one deleted
    last (None without cluster access, or for a pod that requests no devices)."""
    return session.scalars(
        select(KubePod)
        .where(KubePod.namespace == namespace, KubePod.name == name)
        .order_by(KubePod.deleted_at.is_not(None), KubePod.id.desc())
        .limit(1)
    ).one_or_none()


def pod_dra_by_name(session: Session, namespace: str, name: str) -> dict[str, Any] | None:
    """The DRA side of the pod with this name as the API server has it (the live one, else
    the one deleted last), or None when the pod has no claims."""
    pod = latest_pod(session, namespace, name)
    if pod is None or not pod.claims:
        return None
    dra = pods_dra(session, [pod])[pod.uid]
    return {
        "uid": pod.uid,
        "node": pod.node,
        "phase": pod.phase,
        "owner": owner_of(pod),
        "created_at": pod.created_at.isoformat() if pod.created_at else None,
        "started": (pod.created_at or pod.first_seen).isoformat(),
        "deleted_at": pod.deleted_at.isoformat() if pod.deleted_at else None,
        **dra,
    }


def owner_of(pod: KubePod) -> dict[str, str] | None:
    """The pod's controlling owner (a Job, a ReplicaSet, ...) from its ownerReferences."""
    if not pod.owner_kind or not pod.owner_name:
        return None
    return {"kind": pod.owner_kind, "name": pod.owner_name}


TERMINAL_PHASES = ("Succeeded", "Failed")


def pod_ended_at(dra: dict[str, Any]) -> str | None:
    """When the pod of `pod_dra_by_name` stopped holding its claims' devices, as far as the API
    server tells: its deletion; a pod that finished but is not deleted yet has no time for it."""
    return dra["deleted_at"]


def pod_is_running(dra: dict[str, Any]) -> bool:
    return dra["deleted_at"] is None and dra["phase"] not in TERMINAL_PHASES


def cluster_dra_holds(session: Session, dra: dict[str, Any], now: datetime) -> list[dict[str, Any]]:
    """The devices the pod of `pod_dra_by_name` holds through its claims as the API server
    allocated them (no node agent reported them), each with its health while the pod lived:
    from the pod's creation (first seen, if the API server gave no time) to its deletion, or
    now. A device a claim reaches only with admin access is watched, not held, and left out."""
    started = datetime.fromisoformat(dra["started"])
    ended_text = pod_ended_at(dra)
    ended = datetime.fromisoformat(ended_text) if ended_text else now
    held = [d for d in dra["dra_devices"] if not d["admin_access"]]
    changes = _dra_health_changes(session, held, ended)
    holds = []
    for device in held:
        device_id = dra_device_id(device["driver"], device["pool"], device["device"])
        during = health_during(changes.get(device_id, []), started, ended)
        holds.append(
            {
                **device,
                "started": started.isoformat(),
                "ended": ended_text,
                "health_during": during,
                "unhealthy_while_held": any(s["health"] == UNHEALTHY for s in during),
            }
        )
    return holds


def _dra_health_changes(
    session: Session, devices: list[dict[str, Any]], until: datetime
) -> dict[str, list[HealthChange]]:
    """The health events of DRA devices up to `until`, by driver/pool/device, in time order."""
    ids = sorted({dra_device_id(d["driver"], d["pool"], d["device"]) for d in devices})
    if not ids:
        return {}
    found: dict[str, list[HealthChange]] = {}
    for row in session.execute(
        select(Event.id, Event.at, Event.device_id, Event.after)
        .where(
            Event.kind == DRA_HEALTH_EVENT,
            Event.resource.in_(sorted({d["driver"] for d in devices})),
            Event.device_id.in_(ids),
            Event.at <= until,
        )
        .order_by(Event.at, Event.id)
        .limit(EVENT_LIMIT)
    ):
        found.setdefault(row.device_id, []).append(
            HealthChange(
                id=row.id,
                at=row.at,
                device_pk=None,
                node=None,
                kind=DRA_HEALTH_EVENT,
                after=row.after or {},
            )
        )
    return found


def claims_only_pod(
    session: Session, namespace: str, name: str, dra: dict[str, Any], now: datetime
) -> dict[str, Any]:
    """A pod's detail for a pod no node agent has reported holding anything: what the API
    server says of it, and the devices its claims hold."""
    running = pod_is_running(dra)
    holds = cluster_dra_holds(session, dra, now)
    return {
        "namespace": namespace,
        "name": name,
        "uid": dra["uid"],
        "uids": [dra["uid"]],
        "node": dra["node"],
        "nodes": [dra["node"]] if dra["node"] else [],
        "running": running,
        "started": dra["started"],
        "ended": None if running else pod_ended_at(dra),
        "owner": dra["owner"],
        "unhealthy_while_held": any(h["unhealthy_while_held"] for h in holds),
        "history_truncated": False,
        "containers": [],
        "dra_holds": holds,
    }
