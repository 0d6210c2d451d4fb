"""Pods that request devices: stored, joined to allocations, and read for device health.

PodResources names pods but gives no UIDs, so allocations get the UID of the pod with the same
namespace and name bound to the same node. A pod deleted from the API server ends the
allocations it held. allocatedResourcesStatus (KEP-4680) in pod status is the kubelet's view
of each allocated device's health, applied to the device when the pod reports a change.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from devicedeck.inventory.cluster.extended_resources import is_extended_resource, quantity
from devicedeck.inventory.cluster.models import KubePod
from devicedeck.inventory.events import EventLog
from devicedeck.inventory.write.other_writers import (
    apply_reported_health,
    join_allocations,
    release_pod,
)
from devicedeck.kube.dra_health import apply_pod_dra_health, changed_health_reports
from devicedeck.kube.node_sync import ACTOR

HEALTH_SOURCE = "pod_status"
TERMINAL_PHASES = ("Succeeded", "Failed")
# Deleted pods are kept this long, so a pod's owner and UID stay visible after it is gone.
DELETED_POD_RETENTION = timedelta(days=7)


def _container_needs(container: dict[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    # Extended resources cannot be overcommitted: requests equal limits, and the kubelet
    # reads limits. A request alone (limit defaulted from it) is taken too.
    merged = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    needs = {}
    for name, value in merged.items():
        amount = quantity(value)
        if is_extended_resource(name) and amount:
            needs[name] = amount
    return needs


def pod_requests(spec: dict[str, Any]) -> dict[str, int]:
    """Extended resources the pod needs: the sum over its containers, or the largest init
    container's need if that is more (init containers run one at a time)."""
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, amount in _container_needs(container).items():
            total[name] = total.get(name, 0) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in _container_needs(container).items():
            total[name] = max(total.get(name, 0), amount)
    return total


def resource_health(status: dict[str, Any]) -> dict[str, dict[str, str]]:
    """allocatedResourcesStatus of every container: resource name -> device ID -> health."""
    found: dict[str, dict[str, str]] = {}
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for container in status.get(key) or []:
            for entry in container.get("allocatedResourcesStatus") or []:
                name = entry.get("name")
                if not name:
                    continue
                for item in entry.get("resources") or []:
                    if item.get("resourceID"):
                        health = str(item.get("health") or "Unknown")
                        found.setdefault(name, {})[str(item["resourceID"])] = health
    return found


def _owner(metadata: dict[str, Any]) -> tuple[str | None, str | None]:
    owners = metadata.get("ownerReferences") or []
    chosen = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    if not chosen:
        return None, None
    return chosen.get("kind"), chosen.get("name")


def pod_fields(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The kube_pods columns of a pod, or None for a pod that requests no devices."""
    spec = obj.get("spec") or {}
    metadata = obj.get("metadata") or {}
    status = obj.get("status") or {}
    requests = pod_requests(spec)
    claims = pod_claims(spec, status)
    if not requests and not claims:
        return None
    owner_kind, owner_name = _owner(metadata)
    return {
        "namespace": metadata["namespace"],
        "name": metadata["name"],
        "node": spec.get("nodeName") or None,
        "phase": status.get("phase"),
        "owner_kind": owner_kind,
        "owner_name": owner_name,
        "labels": dict(metadata.get("labels") or {}),
        "requests": requests,
        "claims": claims,
        "resource_health": resource_health(status),
    }


def pod_claims(spec: dict[str, Any], status: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's claims: the reference name its containers use, and the ResourceClaim it
    stands for, which for a template claim is generated and recorded in
    status.resourceClaimStatuses (None until the claim exists)."""
    generated = {
        s["name"]: s.get("resourceClaimName")
        for s in status.get("resourceClaimStatuses") or []
        if isinstance(s, dict) and s.get("name")
    }
    claims = [
        {
            "name": str(c["name"]),
            "claim": c.get("resourceClaimName") or generated.get(c["name"]) or None,
            "template": c.get("resourceClaimTemplateName") or None,
        }
        for c in spec.get("resourceClaims") or []
        if isinstance(c, dict) and c.get("name")
    ]
    return sorted(claims, key=lambda c: c["name"])


def requests_devices(obj: dict[str, Any]) -> bool:
    """Whether the pod asks for extended resources or DRA claims (both immutable)."""
    return pod_fields(obj) is not None


def apply_pod(
    session: Session,
    obj: dict[str, Any],
    existing: KubePod | None,
    now: datetime,
    log: EventLog,
    *,
    join: bool = True,
) -> KubePod | None:
    fields = pod_fields(obj)
    if fields is None:
        return None
    metadata = obj["metadata"]
    if existing is None:
        existing = session.scalars(
            select(KubePod).where(KubePod.uid == metadata["uid"])
        ).one_or_none()
    health_before: dict[str, Any] = {}
    if existing is None:
        existing = KubePod(
            uid=metadata["uid"],
            created_at=_timestamp(metadata.get("creationTimestamp")),
            first_seen=now,
            updated_at=now,
            **fields,
        )
        session.add(existing)
    else:
        health_before = dict(existing.resource_health or {})
        if any(getattr(existing, key) != value for key, value in fields.items()):
            for key, value in fields.items():
                setattr(existing, key, value)
            existing.updated_at = now
    if existing.deleted_at is not None:
        return existing
    if existing.node is not None:
        if join:
            join_allocations(session, existing.namespace, existing.name)
        if existing.phase not in TERMINAL_PHASES:
            apply_health(session, existing.node, health_before, existing.resource_health, now, log)
            apply_pod_dra_health(
                session, existing, health_before, existing.resource_health, now, log
            )
    return existing


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def apply_health(
    session: Session,
    node_name: str,
    before: dict[str, Any],
    after: dict[str, Any],
    now: datetime,
    log: EventLog,
) -> None:
    """Apply the device health a pod's status reports, where it changed since the pod last
    reported."""
    changes = {
        (resource, device_id): health
        for resource, device_id, health in changed_health_reports(before, after, claims=False)
    }
    apply_reported_health(
        session, node=node_name, changes=changes, source=HEALTH_SOURCE, now=now, log=log
    )


def end_pod(session: Session, pod: KubePod, now: datetime, log: EventLog) -> None:
    """The pod is gone from the API server: it holds no device any more."""
    pod.deleted_at = now
    if pod.node is None:
        return
    # A pod re-created under the same name (a StatefulSet's) may hold devices already;
    # allocations without a UID then belong to it, not to the deleted one.
    successor = session.scalar(
        select(KubePod.id).where(
            KubePod.namespace == pod.namespace,
            KubePod.name == pod.name,
            KubePod.node == pod.node,
            KubePod.deleted_at.is_(None),
            KubePod.uid != pod.uid,
        )
    )
    release_pod(
        session,
        node=pod.node,
        namespace=pod.namespace,
        pod=pod.name,
        pod_uid=pod.uid,
        successor=successor is not None,
        reason="pod deleted",
        now=now,
        log=log,
    )


def apply_pod_event(session: Session, event_type: str, obj: dict[str, Any], now: datetime) -> None:
    log = EventLog(at=now, actor=ACTOR)
    if event_type == "DELETED":
        pod = session.scalars(
            select(KubePod).where(KubePod.uid == obj["metadata"]["uid"])
        ).one_or_none()
        if pod is not None and pod.deleted_at is None:
            end_pod(session, pod, now, log)
    else:
        apply_pod(session, obj, None, now, log)
    log.write(session)


def apply_pod_list(session: Session, items: list[dict[str, Any]], now: datetime) -> None:
    """A full list: pods missing from it were deleted while nobody watched."""
    log = EventLog(at=now, actor=ACTOR)
    live = {
        pod.uid: pod
        for pod in session.scalars(
            select(KubePod).where(KubePod.deleted_at.is_(None)).order_by(KubePod.id)
        )
    }
    seen = set()
    for obj in items:
        uid = (obj.get("metadata") or {}).get("uid")
        if uid and apply_pod(session, obj, live.get(uid), now, log, join=False) is not None:
            seen.add(uid)
    for uid, pod in live.items():
        if uid not in seen:
            end_pod(session, pod, now, log)
    session.flush()
    join_allocations(session)
    prune_deleted_pods(session, now)
    log.write(session)


def prune_deleted_pods(session: Session, now: datetime) -> None:
    session.execute(
        delete(KubePod).where(KubePod.deleted_at < now - DELETED_POD_RETENTION),
        execution_options={"synchronize_session": False},
    )
