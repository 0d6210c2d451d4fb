"""Pods that request devices, as the API server shows them, with the devices they hold now."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, select, tuple_
from sqlalchemy.orm import Session

from app.inventory.cluster_models import KubePod
from app.inventory.dra_pods import pods_dra
from app.inventory.errors import InvalidInput, Problem
from app.inventory.models import Allocation, Node
from app.inventory.pages import Page, after_key, check_limit, decode_cursor, encode_cursor

SORT = "namespace,name,uid"


@dataclass(frozen=True)
class KubePodFilters:
    namespace: str | None = None
    node: str | None = None
    phase: str | None = None
    deleted: bool = False


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def list_kube_pods(
    session: Session, filters: KubePodFilters, *, cursor: str | None = None, limit: int = 50
) -> Page[dict[str, Any]]:
    check_limit(limit)
    if filters.phase is not None and len(filters.phase) > 32:
        raise InvalidInput("phase is too long", [Problem("phase", "length", "at most 32")])
    conditions: list[ColumnElement[bool]] = [
        KubePod.deleted_at.is_not(None) if filters.deleted else KubePod.deleted_at.is_(None)
    ]
    if filters.namespace is not None:
        conditions.append(KubePod.namespace == filters.namespace)
    if filters.node is not None:
        conditions.append(KubePod.node == filters.node)
    if filters.phase is not None:
        conditions.append(KubePod.phase == filters.phase)
    columns: list[Any] = [KubePod.namespace, KubePod.name, KubePod.uid]
    query = select(KubePod).where(*conditions)
    if cursor:
        query = query.where(after_key(columns, decode_cursor(cursor, SORT, 3), False))
    pods = list(session.scalars(query.order_by(*columns).limit(limit + 1)))
    more = len(pods) > limit
    pods = pods[:limit]
    count = session.scalar(select(func.count()).select_from(KubePod).where(*conditions))
    held = _devices_held(session, pods)
    dra = pods_dra(session, pods)
    items = [pod_summary(pod, held.get(pod.uid, []), dra.get(pod.uid)) for pod in pods]
    next_cursor = None
    if more and pods:
        next_cursor = encode_cursor(SORT, [pods[-1].namespace, pods[-1].name, pods[-1].uid])
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
                "started": _iso(allocation.started),
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
        "created_at": _iso(pod.created_at),
        "first_seen": _iso(pod.first_seen),
        "updated_at": _iso(pod.updated_at),
        "deleted_at": _iso(pod.deleted_at),
    }
