"""The DRA side of pods: their claims by real name, who else uses them, and their devices."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from devicedeck.inventory.cluster.models import DraClaim, DraClaimDevice, KubePod
from devicedeck.inventory.dra.summary import health_by_device


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


def pod_dra_by_name(session: Session, namespace: str, name: str) -> dict[str, Any] | None:
    """The DRA side of the pod with this name as the API server has it (the live one, else
    the one deleted last), or None when the pod has no claims."""
    pod = session.scalars(
        select(KubePod)
        .where(KubePod.namespace == namespace, KubePod.name == name)
        .order_by(KubePod.deleted_at.is_not(None), KubePod.id.desc())
        .limit(1)
    ).one_or_none()
    if pod is None or not pod.claims:
        return None
    dra = pods_dra(session, [pod])[pod.uid]
    return {
        "uid": pod.uid,
        "node": pod.node,
        "phase": pod.phase,
        "created_at": pod.created_at.isoformat() if pod.created_at else None,
        "deleted_at": pod.deleted_at.isoformat() if pod.deleted_at else None,
        **dra,
    }


def claims_only_pod(namespace: str, name: str, dra: dict[str, Any]) -> dict[str, Any]:
    """A pod page's detail for a pod no node agent has reported holding anything: what the
    API server says of it, with no holds."""
    running = dra["deleted_at"] is None and dra["phase"] not in ("Succeeded", "Failed")
    return {
        "namespace": namespace,
        "name": name,
        "uid": dra["uid"],
        "uids": [dra["uid"]],
        "node": dra["node"],
        "nodes": [dra["node"]] if dra["node"] else [],
        "running": running,
        "started": dra["created_at"],
        "ended": None if running else dra["deleted_at"],
        "unhealthy_while_held": False,
        "history_truncated": False,
        "containers": [],
    }
