"""Pods that request devices, as the API server shows them, with the devices they hold now."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, tuple_
from sqlalchemy.orm import Session

from devicedeck.clock import iso
from devicedeck.inventory.cluster.models import KubePod
from devicedeck.inventory.dra.pods import pods_dra
from devicedeck.inventory.errors import InvalidInput, Problem
from devicedeck.inventory.models import Allocation, Node
from devicedeck.inventory.read.conditions import equal_where_given
from devicedeck.inventory.read.pagination import Keyset, Page

_ORDER = Keyset("namespace,name,uid", [KubePod.namespace, KubePod.name, KubePod.uid])


@dataclass(frozen=True)
class KubePodFilters:
    namespace: str | None = None
    node: str | None = None
    phase: str | None = None
    deleted: bool = False


def list_kube_pods(
    session: Session, filters: KubePodFilters, *, cursor: str | None = None, limit: int = 50
) -> Page[dict[str, Any]]:
    if filters.phase is not None and len(filters.phase) > 32:
        raise InvalidInput("phase is too long", [Problem("phase", "length", "at most 32")])
    conditions = equal_where_given(
        (KubePod.namespace, filters.namespace),
        (KubePod.node, filters.node),
        (KubePod.phase, filters.phase),
    )
    conditions.append(
        KubePod.deleted_at.is_not(None) if filters.deleted else KubePod.deleted_at.is_(None)
    )
    query = _ORDER.page_query(select(KubePod).where(*conditions), cursor, limit)
    pods, next_cursor = _ORDER.cut(
        session.scalars(query).all(), limit, lambda pod: [pod.namespace, pod.name, pod.uid]
    )
    count = session.scalar(select(func.count()).select_from(KubePod).where(*conditions))
    held = _devices_held(session, pods)
    dra = pods_dra(session, pods)
    items = [pod_summary(pod, held.get(pod.uid, []), dra.get(pod.uid)) for pod in pods]
    return Page(items=items, next_cursor=next_cursor, count=count)


def _devices_held(session: Session, pods: list[KubePod]) -> dict[str, list[dict[str, Any]]]:
    """Current allocations of each pod: joined by UID, or by name on the pod's node."""
    live = [p for p in pods if p.node is not None and p.deleted_at is None]
    if not live:
        return {}
    by_key = {(p.namespace, p.name, p.node): p.uid for p in live}
    held: dict[str, list[dict[str, Any]]] = defaultdict(list)
    rows = session.execute(
        select(Allocation, Node.name)
        .join(Node, Node.id == Allocation.node_id)
        .where(
            Allocation.ended.is_(None),
            tuple_(Allocation.namespace, Allocation.pod).in_(
                sorted({(p.namespace, p.name) for p in live})
            ),
        )
        .order_by(Allocation.container, Allocation.resource, Allocation.device_id)
    )
    for allocation, node_name in rows:
        uid = by_key.get((allocation.namespace, allocation.pod, node_name))
        if uid is None or (allocation.pod_uid is not None and allocation.pod_uid != uid):
            continue
        held[uid].append(
            {
                "id": allocation.device_pk,
                "container": allocation.container,
                "resource": allocation.resource,
                "device_id": allocation.device_id,
                "started": iso(allocation.started),
            }
        )
    return held


def pod_summary(
    pod: KubePod, devices: list[dict[str, Any]], dra: dict[str, Any] | None = None
) -> dict[str, Any]:
    dra = dra or {"claims": [], "dra_devices": []}
    return {
        "uid": pod.uid,
        "namespace": pod.namespace,
        "name": pod.name,
        "node": pod.node,
        "phase": pod.phase,
        "owner": {"kind": pod.owner_kind, "name": pod.owner_name} if pod.owner_kind else None,
        "labels": pod.labels,
        "requests": pod.requests,
        "claims": dra["claims"],
        "resource_health": pod.resource_health,
        "devices": devices,
        "dra_devices": dra["dra_devices"],
        "created_at": iso(pod.created_at),
        "first_seen": iso(pod.first_seen),
        "updated_at": iso(pod.updated_at),
        "deleted_at": iso(pod.deleted_at),
    }
