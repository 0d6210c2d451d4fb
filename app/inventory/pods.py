"""Pods as the kubelet reports them: pod -> containers -> devices (plugin and DRA), current."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, literal, select, tuple_, union
from sqlalchemy.orm import Session

from app.clock import iso
from app.inventory.freshness import Freshness
from app.inventory.models import Allocation, ClaimAllocation, Device, Node
from app.inventory.pages import Keyset, Page, bounded_count
from app.inventory.queries import effective_health


@dataclass(frozen=True)
class PodFilters:
    namespace: str | None = None
    node: str | None = None
    q: str | None = None


def _current_pods(filters: PodFilters) -> Any:
    """(namespace, pod) of every pod holding a device now, from both allocation tables."""
    parts = []
    for table in (Allocation, ClaimAllocation):
        part = select(table.namespace.label("namespace"), table.pod.label("pod")).where(
            table.ended.is_(None)
        )
        if filters.node is not None:
            part = part.join(Node, Node.id == table.node_id).where(Node.name == filters.node)
        parts.append(part)
    pods = union(*parts).subquery()
    conditions: list[ColumnElement[bool]] = []
    if filters.namespace is not None:
        conditions.append(pods.c.namespace == filters.namespace)
    if filters.q:
        conditions.append(pods.c.pod.contains(filters.q, autoescape=True))
    return pods, conditions


def list_pods(
    session: Session,
    filters: PodFilters,
    clock: Freshness,
    *,
    cursor: str | None = None,
    limit: int = 50,
) -> Page[dict[str, Any]]:
    pods, conditions = _current_pods(filters)
    columns = [pods.c.namespace, pods.c.pod]
    order = Keyset("pod", columns)
    query = order.page_query(select(*columns).where(*conditions), cursor, limit)
    pairs, next_cursor = order.cut(
        [tuple(row) for row in session.execute(query)], limit, lambda pair: list(pair)
    )
    count, exact = bounded_count(session, select(pods.c.pod).where(*conditions))
    items = _pods_with_devices(session, pairs, clock)
    return Page(items=items, next_cursor=next_cursor, count=count, count_exact=exact)


def claim_summary(claim: ClaimAllocation) -> dict[str, Any]:
    return {
        "claim": f"{claim.claim_namespace}/{claim.claim_name}",
        "driver": claim.driver,
        "pool": claim.pool,
        "device": claim.device,
        "share_id": claim.share_id,
        "cdi_devices": list(claim.cdi_devices),
        "started": iso(claim.started),
    }


def _pods_with_devices(
    session: Session, pairs: list[tuple[Any, ...]], clock: Freshness
) -> list[dict[str, Any]]:
    if not pairs:
        return []
    health = effective_health(clock)
    plugin_rows = session.execute(
        select(Allocation, Node.name, Device.numa_nodes, health.label("health"))
        .join(Node, Node.id == Allocation.node_id)
        .join(Device, Device.id == Allocation.device_pk)
        .where(Allocation.ended.is_(None), tuple_(Allocation.namespace, Allocation.pod).in_(pairs))
        .order_by(Allocation.container, Allocation.resource, Allocation.device_id)
    ).all()
    claim_rows = session.execute(
        select(ClaimAllocation, Node.name, literal(None))
        .join(Node, Node.id == ClaimAllocation.node_id)
        .where(
            ClaimAllocation.ended.is_(None),
            tuple_(ClaimAllocation.namespace, ClaimAllocation.pod).in_(pairs),
        )
        .order_by(ClaimAllocation.container, ClaimAllocation.driver, ClaimAllocation.device)
    ).all()
    pods: dict[tuple[str, str], dict[str, Any]] = {}
    containers: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)

    def container_of(namespace: str, pod: str, node: str, name: str) -> dict[str, Any]:
        key = (namespace, pod)
        entry = pods.setdefault(
            key, {"namespace": namespace, "name": pod, "uid": None, "nodes": []}
        )
        if node not in entry["nodes"]:
            entry["nodes"].append(node)
        return containers[key].setdefault(name, {"name": name, "devices": [], "claims": []})

    for allocation, node_name, numa, device_health in plugin_rows:
        container = container_of(
            allocation.namespace, allocation.pod, node_name, allocation.container
        )
        if allocation.pod_uid:
            pods[(allocation.namespace, allocation.pod)]["uid"] = allocation.pod_uid
        container["devices"].append(
            {
                "id": allocation.device_pk,
                "resource": allocation.resource,
                "device_id": allocation.device_id,
                "health": device_health,
                "numa_nodes": list(numa),
                "started": iso(allocation.started),
            }
        )
    for claim, node_name, _ in claim_rows:
        container = container_of(claim.namespace, claim.pod, node_name, claim.container)
        container["claims"].append(claim_summary(claim))
    result = []
    for key in pairs:
        if key not in pods:
            continue
        pod = pods[key]
        pod["node"] = pod["nodes"][0]
        pod["containers"] = [containers[key][name] for name in sorted(containers[key])]
        result.append(pod)
    return result
