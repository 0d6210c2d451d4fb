"""Changes to rows a snapshot stream owns, made by a writer other than the stream: the cluster
watcher ending a deleted pod's allocations, joining pod UIDs to allocations, device health
from pod status (KEP-4680), and derived devices removed or brought back by the Node's status.

The unchanged-snapshot shortcut trusts a stream's content hash to describe its rows, so every
change here clears the owning stream's hash in the same transaction: the stream's next
snapshot is then applied in full, and undoes or keeps the change by what the kubelet says,
whichever path it would have taken. Writers outside devicedeck/inventory change stream-owned rows
only through these functions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, exists, or_, select, tuple_, update
from sqlalchemy.orm import Session

from devicedeck.inventory.cluster.models import KubePod
from devicedeck.inventory.events import EventLog
from devicedeck.inventory.fields import HEALTHY, PRESENT
from devicedeck.inventory.models import Allocation, ClaimAllocation, Device, Node
from devicedeck.inventory.write.derived_health import DERIVED, GONE, UNCERTAIN, status_counts
from devicedeck.inventory.write.derived_judging import judge_stored, stored_after
from devicedeck.inventory.write.device_lists import mark_removed_by_capacity
from devicedeck.inventory.write.receipts import (
    PODRESOURCES_STREAM,
    forget_content_hash,
    listandwatch_stream,
)


def lock_node_id(session: Session, name: str) -> int | None:
    """The node's id, its row locked like a snapshot locks it: device and allocation rows of a
    node change under that lock, so a snapshot cannot interleave with (and undo) this change."""
    return session.scalar(select(Node.id).where(Node.name == name).with_for_update())


def join_allocations(
    session: Session, namespace: str | None = None, name: str | None = None
) -> None:
    """Give current allocations without a pod UID the UID of the live pod with the same
    namespace and name on the same node. Without arguments, for every such allocation.

    The stream's content hash stays: a snapshot that names no UID leaves a learned one as it
    is, so the full path would keep this change just as the unchanged shortcut does."""
    match = and_(
        KubePod.namespace == Allocation.namespace,
        KubePod.name == Allocation.pod,
        KubePod.deleted_at.is_(None),
        Node.id == Allocation.node_id,
        Node.name == KubePod.node,
    )
    pod_here = exists().where(match).correlate(Allocation)
    conditions = [Allocation.ended.is_(None), Allocation.pod_uid.is_(None), pod_here]
    if namespace is not None:
        conditions += [Allocation.namespace == namespace, Allocation.pod == name]
    uid = (
        select(KubePod.uid)
        .where(match)
        .correlate(Allocation)
        .order_by(KubePod.id.desc())
        .limit(1)
        .scalar_subquery()
    )
    session.execute(
        update(Allocation).where(*conditions).values(pod_uid=uid),
        execution_options={"synchronize_session": False},
    )


def pod_name_reused(session: Session, pod: KubePod) -> None:
    """A live pod is on a node where a pod of its name was deleted. The node's PodResources
    snapshots did not start holds for that name while only the deleted pod was known
    (`allocation_changes`), so the stream's next snapshot must be applied in full to start
    this pod's."""
    if pod.node is None or pod.deleted_at is not None:
        return
    deleted_before = session.scalar(
        select(KubePod.id).where(
            KubePod.namespace == pod.namespace,
            KubePod.name == pod.name,
            KubePod.node == pod.node,
            KubePod.deleted_at.is_not(None),
        )
    )
    if deleted_before is None:
        return
    node_id = lock_node_id(session, pod.node)
    if node_id is not None:
        forget_content_hash(session, node_id, PODRESOURCES_STREAM)


def release_pod(
    session: Session,
    *,
    node: str,
    namespace: str,
    pod: str,
    pod_uid: str,
    successor: bool,
    reason: str,
    now: datetime,
    log: EventLog,
) -> None:
    """End the current allocations of a pod that is gone. With no successor (a pod re-created
    under the same name on the node), allocations not yet joined to a UID, and the pod's DRA
    claims, are its too."""
    node_id = lock_node_id(session, node)
    if node_id is None:
        return
    owned = Allocation.pod_uid == pod_uid
    if not successor:
        owned = or_(owned, Allocation.pod_uid.is_(None))
    where: dict[str, Any] = {"node": node, "namespace": namespace, "pod": pod}
    released = 0
    for allocation in session.scalars(
        select(Allocation)
        .where(
            Allocation.node_id == node_id,
            Allocation.namespace == namespace,
            Allocation.pod == pod,
            Allocation.ended.is_(None),
            owned,
        )
        .order_by(Allocation.id)
    ):
        allocation.ended = now
        released += 1
        log.add(
            "released",
            **where,
            resource=allocation.resource,
            device_id=allocation.device_id,
            device_pk=allocation.device_pk,
            container=allocation.container,
            before={"started": allocation.started.isoformat(), "pod_uid": allocation.pod_uid},
            after={"reason": reason, "pod_uid": pod_uid},
        )
    if not successor:
        for claim in session.scalars(
            select(ClaimAllocation)
            .where(
                ClaimAllocation.node_id == node_id,
                ClaimAllocation.namespace == namespace,
                ClaimAllocation.pod == pod,
                ClaimAllocation.ended.is_(None),
            )
            .order_by(ClaimAllocation.id)
        ):
            claim.ended = now
            released += 1
            log.add(
                "claim_released",
                **where,
                resource=claim.driver,
                device_id=f"{claim.driver}/{claim.pool}/{claim.device}",
                container=claim.container,
                before={"claim": f"{claim.claim_namespace}/{claim.claim_name}"},
                after={"reason": reason, "pod_uid": pod_uid},
            )
    if released:
        forget_content_hash(session, node_id, PODRESOURCES_STREAM)


def apply_reported_health(
    session: Session,
    *,
    node: str,
    changes: dict[tuple[str, str], str],
    source: str,
    now: datetime,
    log: EventLog,
) -> None:
    """Set the health of the node's devices, by (resource, device ID), as another source than
    the device plugin reports it."""
    if not changes:
        return
    node_id = lock_node_id(session, node)
    if node_id is None:
        return
    devices = session.scalars(
        select(Device)
        .where(
            Device.node_id == node_id,
            tuple_(Device.resource, Device.device_id).in_(list(changes)),
        )
        .order_by(Device.id)
    )
    changed_resources: set[str] = set()
    for device in devices:
        health = changes[(device.resource, device.device_id)]
        if device.health == health:
            continue
        log.add(
            "health_changed",
            node=node,
            resource=device.resource,
            device_id=device.device_id,
            device_pk=device.id,
            before={
                "health": device.health,
                "raw_health": device.raw_health,
                "health_source": device.health_source,
            },
            after={"health": health, "raw_health": health, "health_source": source},
        )
        device.health = health
        device.raw_health = health
        device.health_source = source
        device.health_changed_at = now
        changed_resources.add(device.resource)
    for resource in sorted(changed_resources):
        forget_content_hash(session, node_id, listandwatch_stream(resource))


def reconsider_derived_devices(session: Session, node: Node, now: datetime, log: EventLog) -> None:
    """Apply the Node's status, as it now is, to the node's devices whose health is derived
    (devicedeck/inventory/write/derived_health.py). A status that is not evidence for the last
    snapshot's offer marks the devices not offered that it leaves untold; one that is, is
    left for the stream's next snapshot to be judged with, as the two may describe different
    moments. A removed device comes back only through its stream's snapshot."""
    rows = session.scalars(
        select(Device)
        .where(Device.node_id == node.id, Device.health_source == DERIVED)
        .order_by(Device.resource, Device.device_id)
    )
    by_resource: dict[str, list[Device]] = {}
    for device in rows:
        by_resource.setdefault(device.resource, []).append(device)
    stored = node.derived_basis
    for resource, devices in by_resource.items():
        judgement = judge_stored(
            stored,
            resource,
            known=[d.device_id for d in devices],
            offered=[d.device_id for d in devices if d.state == PRESENT and d.health == HEALTHY],
            removed=[d.device_id for d in devices if d.state != PRESENT],
            counts=status_counts(node.capacity, node.allocatable, resource),
        )
        if judgement.counts is not None:
            # The status agrees with the offer of the last snapshot, which is older than the
            # status: they may agree by coincidence (one device offered again in the status
            # while another left, neither yet in the snapshot), and judged as one moment they
            # would name the wrong device. The stream's next snapshot, a change or the agent's
            # heartbeat, takes the full path and is judged with this status.
            forget_content_hash(session, node.id, listandwatch_stream(resource))
            continue
        stored = stored_after(stored, resource, judgement, log, node.name) or stored
        where: dict[str, Any] = {"node": node.name, "resource": resource}
        changed = False
        for device in devices:
            presence = judgement.presence.get(device.device_id)
            if presence == GONE and device.state == PRESENT:
                device.presence_uncertain = False
                mark_removed_by_capacity(device, now, log, **where)
                changed = True
            elif device.state == PRESENT and device.presence_uncertain != (presence == UNCERTAIN):
                device.presence_uncertain = presence == UNCERTAIN
                changed = True
        if changed:
            forget_content_hash(session, node.id, listandwatch_stream(resource))
    if stored != node.derived_basis:
        node.derived_basis = stored


def mark_status_gap(session: Session) -> None:
    """The Node statuses were out of sight (the API server or the watcher away): each node's
    next judged observation of derived health may stand for several changes
    (devicedeck/inventory/write/derived_health.py, `Basis.gap`)."""
    nodes = session.scalars(
        select(Node).where(Node.derived_basis.is_not(None)).order_by(Node.id).with_for_update()
    )
    for node in nodes:
        basis = node.derived_basis or {}
        node.derived_basis = {resource: {**entry, "gap": True} for resource, entry in basis.items()}
