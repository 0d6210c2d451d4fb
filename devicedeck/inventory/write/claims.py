"""The PodResources stream's DRA side: which container holds which DRA device (driver, pool,
device) through which ResourceClaim, as intervals."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from devicedeck.inventory.events import EventLog
from devicedeck.inventory.models import ClaimAllocation, table_of
from devicedeck.inventory.schemas import PodResourcesSnapshot
from devicedeck.inventory.write.allocations import Ending
from devicedeck.inventory.write.bulk import BulkInsert

ClaimKey = tuple[str, str, str, str, str, str, str, str, str | None]

_claims = table_of(ClaimAllocation)
_CURRENT_CLAIMS = select(
    _claims.c.id,
    _claims.c.namespace,
    _claims.c.pod,
    _claims.c.container,
    _claims.c.claim_namespace,
    _claims.c.claim_name,
    _claims.c.driver,
    _claims.c.pool,
    _claims.c.device,
    _claims.c.share_id,
).where(_claims.c.node_id == bindparam("node_id"), _claims.c.ended.is_(None))
_END_CLAIMS = Ending(_claims)
_INSERT_CLAIMS = BulkInsert(
    _claims,
    shared=("node_id", "started"),
    per_row=(
        "namespace",
        "pod",
        "container",
        "claim_namespace",
        "claim_name",
        "driver",
        "pool",
        "device",
        "share_id",
        "cdi_devices",
    ),
)


def replace_claim_allocations(
    session: Session,
    node_id: int,
    snapshot: PodResourcesSnapshot,
    now: datetime,
    log: EventLog,
    *,
    claims_open: bool | None = None,
) -> None:
    """The node's current claims become those the snapshot lists. `claims_open` False (the
    node is known to hold none) spares a snapshot that lists none the read."""
    wanted: dict[ClaimKey, list[str]] = {}
    for pod in snapshot.pod_resources:
        for container in pod.containers:
            for claim in container.dynamic_resources:
                for res in claim.claim_resources:
                    key: ClaimKey = (
                        pod.namespace,
                        pod.name,
                        container.name,
                        claim.claim_namespace,
                        claim.claim_name,
                        res.driver_name,
                        res.pool_name,
                        res.device_name,
                        res.share_id,
                    )
                    wanted[key] = [c.name for c in res.cdi_devices]
    if not wanted and claims_open is False:
        return
    current = {
        (
            c.namespace,
            c.pod,
            c.container,
            c.claim_namespace,
            c.claim_name,
            c.driver,
            c.pool,
            c.device,
            c.share_id,
        ): c
        for c in session.execute(_CURRENT_CLAIMS, {"node_id": node_id})
    }
    ended: list[int] = []
    for key in sorted(current.keys() - wanted.keys(), key=str):
        claim_row = current[key]
        ended.append(claim_row.id)
        log.add(
            "claim_released",
            node=snapshot.node,
            resource=claim_row.driver,
            device_id=f"{claim_row.driver}/{claim_row.pool}/{claim_row.device}",
            namespace=claim_row.namespace,
            pod=claim_row.pod,
            container=claim_row.container,
            before={"claim": f"{claim_row.claim_namespace}/{claim_row.claim_name}"},
        )
    _END_CLAIMS.execute(session, ended, now)
    rows = []
    for key in sorted(wanted.keys() - current.keys(), key=str):
        (
            namespace,
            pod_name,
            container_name,
            claim_ns,
            claim_name,
            driver,
            pool,
            device,
            share_id,
        ) = key
        rows.append(
            {
                "node_id": node_id,
                "namespace": namespace,
                "pod": pod_name,
                "container": container_name,
                "claim_namespace": claim_ns,
                "claim_name": claim_name,
                "driver": driver,
                "pool": pool,
                "device": device,
                "share_id": share_id,
                "cdi_devices": wanted[key],
                "started": now,
                "ended": None,
            }
        )
        log.add(
            "claim_allocated",
            node=snapshot.node,
            resource=driver,
            device_id=f"{driver}/{pool}/{device}",
            namespace=namespace,
            pod=pod_name,
            container=container_name,
            after={"claim": f"{claim_ns}/{claim_name}", "share_id": share_id},
        )
    _INSERT_CLAIMS.execute(session, rows)
