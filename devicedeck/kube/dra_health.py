"""DRA device health as the API server reports it, recorded through the domain
(devicedeck/inventory/dra/health.py; the drivers' own health streams reach it through node
agents: devicedeck/inventory/dra/health_reports.py). Two sources:
- pod status (KEP-4680): `allocatedResourcesStatus` entries named `claim:REF[/REQUEST]`, REF
  being the container's claim reference; the kubelet names each device by the first CDI
  device ID its driver gave it, else `driver/pool/device`;
- the claim's `status.devices[].conditions`, written by the driver: a `Ready` or `Healthy`
  condition says whether the device works (other condition types are shown, not judged).
A device's health is the latest report from either, like a plugin device's.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from devicedeck.inventory.cluster.models import DraClaim, DraClaimDevice, KubePod
from devicedeck.inventory.dra.health import DeviceKey, set_health
from devicedeck.inventory.events import EventLog
from devicedeck.inventory.fields import HEALTHY, UNHEALTHY
from devicedeck.inventory.models import ClaimAllocation, Node

POD_STATUS = "pod_status"
CLAIM_STATUS = "claim_status"
CLAIM_PREFIX = "claim:"
HEALTH_CONDITIONS = ("Ready", "Healthy")


def parse_device_id(value: str) -> DeviceKey | None:
    """driver/pool/device back into its parts. A driver is a DNS subdomain and a device a DNS
    label, so neither has a slash; the pool may. CDI IDs (vendor/class=name) have an '='."""
    if "=" in value:
        return None
    parts = value.split("/")
    if len(parts) < 3 or not all(parts):
        return None
    return parts[0], "/".join(parts[1:-1]), parts[-1]


def condition_health(conditions: list[Any]) -> tuple[str, str, str | None] | None:
    """(health, raw, message) from a device's conditions, or None if none of them says."""
    for condition in conditions:
        if not isinstance(condition, dict) or condition.get("type") not in HEALTH_CONDITIONS:
            continue
        status = condition.get("status")
        if status not in ("True", "False"):
            continue
        raw = f"{condition['type']}={status}"
        if condition.get("reason"):
            raw += f" ({condition['reason']})"
        health = HEALTHY if status == "True" else UNHEALTHY
        return health, raw[:253], condition.get("message") or None
    return None


def apply_claim_conditions(
    session: Session, claim: str, results: list[dict[str, Any]], now: datetime, log: EventLog
) -> None:
    for result in results:
        judged = condition_health(result.get("conditions") or [])
        if judged is None:
            continue
        health, raw, message = judged
        key = (result["driver"], result["pool"], result["device"])
        set_health(
            session,
            key,
            health,
            raw=raw,
            source=CLAIM_STATUS,
            reported_by=claim,
            message=message,
            now=now,
            log=log,
        )


def _claim_devices(session: Session, namespace: str, claim: str | None) -> list[DraClaimDevice]:
    if claim is None:
        return []
    return list(
        session.scalars(
            select(DraClaimDevice)
            .join(DraClaim, DraClaim.id == DraClaimDevice.claim_id)
            .where(DraClaim.namespace == namespace, DraClaim.name == claim)
            .order_by(DraClaimDevice.id)
        )
    )


def _by_cdi(session: Session, pod: KubePod, claim: str | None, cdi_id: str) -> set[DeviceKey]:
    """Devices PodResources reported with this CDI device ID for the pod on its node."""
    query = (
        select(ClaimAllocation)
        .join(Node, Node.id == ClaimAllocation.node_id)
        .where(
            Node.name == pod.node,
            ClaimAllocation.namespace == pod.namespace,
            ClaimAllocation.pod == pod.name,
            ClaimAllocation.ended.is_(None),
        )
        .order_by(ClaimAllocation.id)
    )
    if claim is not None:
        query = query.where(ClaimAllocation.claim_name == claim)
    return {
        (row.driver, row.pool, row.device)
        for row in session.scalars(query)
        if cdi_id in (row.cdi_devices or [])
    }


def resolve_device(
    session: Session, pod: KubePod, claim: str | None, request: str, resource_id: str
) -> DeviceKey | None:
    """The device an allocatedResourcesStatus entry names, or None when the evidence does not
    single one out."""
    results = [
        r
        for r in _claim_devices(session, pod.namespace, claim)
        if not request or r.request == request or r.request.startswith(f"{request}/")
    ]
    keys = {(r.driver, r.pool, r.device) for r in results}
    named = parse_device_id(resource_id)
    if named is not None:
        return named
    found = _by_cdi(session, pod, claim, resource_id)
    if len(found) == 1:
        return found.pop()
    # A CDI ID PodResources has not (yet) reported: a request with one device is that device.
    if not found and len(keys) == 1:
        return keys.pop()
    return None


def changed_health_reports(
    before: dict[str, Any], after: dict[str, Any], *, claims: bool
) -> Iterator[tuple[str, str, str]]:
    """(status name, resource ID, health) of each entry of a pod's allocatedResourcesStatus
    that changed since the pod last reported: the DRA entries ("claim:...") with `claims`, the
    device plugins' otherwise. Only Healthy and Unhealthy count: "Unknown" is the kubelet saying
    it does not know, which should override nothing."""
    for status_name, devices in after.items():
        if status_name.startswith(CLAIM_PREFIX) != claims:
            continue
        for resource_id, health in devices.items():
            if health not in (HEALTHY, UNHEALTHY):
                continue
            if (before.get(status_name) or {}).get(resource_id) != health:
                yield status_name, resource_id, health


def apply_pod_dra_health(
    session: Session,
    pod: KubePod,
    before: dict[str, Any],
    after: dict[str, Any],
    now: datetime,
    log: EventLog,
) -> None:
    """Apply the DRA entries of a pod's allocatedResourcesStatus that changed since the pod
    last reported."""
    claims = {c["name"]: c.get("claim") for c in pod.claims if isinstance(c, dict)}
    for status_name, resource_id, health in changed_health_reports(before, after, claims=True):
        reference, _, request = status_name[len(CLAIM_PREFIX) :].partition("/")
        key = resolve_device(session, pod, claims.get(reference), request, resource_id)
        if key is None:
            continue
        set_health(
            session,
            key,
            health,
            raw=health,
            source=POD_STATUS,
            reported_by=f"{pod.namespace}/{pod.name}",
            message=f"{status_name} {resource_id}",
            now=now,
            log=log,
        )
