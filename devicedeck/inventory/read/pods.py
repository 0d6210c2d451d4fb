"""Pods as the kubelet reports them: pod -> containers -> devices (plugin and DRA), current."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, func, literal, select, tuple_, union
from sqlalchemy.orm import Session

from devicedeck.clock import iso
from devicedeck.inventory.models import Allocation, ClaimAllocation, Device, Node
from devicedeck.inventory.read.freshness import Freshness
from devicedeck.inventory.read.pagination import (
    EXACT_COUNT_LIMIT,
    Keyset,
    Page,
    after_key,
    bounded_count,
    check_limit,
    decode_cursor,
)
from devicedeck.inventory.read.queries import effective_health


@dataclass(frozen=True)
class PodFilters:
    namespace: str | None = None
    node: str | None = None
    q: str | None = None


def _current_pods(filters: PodFilters, after: list[Any] | None) -> list[Select[Any]]:
    """Per allocation table, (namespace, pod) of the pods holding a device now, distinct and in
    order: each is an ordered walk of a partial index that stops after a page, where a UNION
    of the two would first collect every pod of the fleet."""
    parts: list[Any] = []
    for table in (Allocation, ClaimAllocation):
        columns: list[Any] = [table.namespace, table.pod]
        part: Any = select(*columns).where(table.ended.is_(None)).distinct()
        if filters.node is not None:
            node_id = select(Node.id).where(Node.name == filters.node).scalar_subquery()
            part = part.where(table.node_id == node_id)
        if filters.namespace is not None:
            part = part.where(table.namespace == filters.namespace)
        if filters.q:
            part = part.where(table.pod.contains(filters.q, autoescape=True))
        if after is not None:
            part = part.where(after_key(columns, after, False))
        parts.append(part.order_by(*columns))
    return parts


def list_pods(
    session: Session,
    filters: PodFilters,
    clock: Freshness,
    *,
    cursor: str | None = None,
    limit: int = 50,
) -> Page[dict[str, Any]]:
    check_limit(limit)
    after = decode_cursor(cursor, "pod", 2) if cursor else None
    found: set[tuple[Any, ...]] = set()
    for part in _current_pods(filters, after):
        found.update(tuple(row) for row in session.execute(part.limit(limit + 1)))
    pairs, next_cursor = Keyset("pod", [Allocation.namespace, Allocation.pod]).cut(
        sorted(found), limit, lambda pair: list(pair)
    )
    count, exact = _count_pods(session, _current_pods(filters, None))
    items = _pods_with_devices(session, pairs, clock)
    return Page(items=items, next_cursor=next_cursor, count=count, count_exact=exact)


def _count_pods(session: Session, parts: list[Select[Any]]) -> tuple[int, bool]:
    """Pods in either table, counted once; past EXACT_COUNT_LIMIT in one table, the largest
    table's count (bounded_count's estimate on PostgreSQL), flagged as not exact."""
    counts = [bounded_count(session, part.order_by(None)) for part in parts]
    if all(exact for _, exact in counts) and sum(n for n, _ in counts) <= EXACT_COUNT_LIMIT:
        if sum(1 for n, _ in counts if n) <= 1:  # one table holds them all: none counted twice
            return sum(n for n, _ in counts), True
        both = union(*(part.order_by(None) for part in parts)).subquery()
        return int(session.scalar(select(func.count()).select_from(both)) or 0), True
    return max(n for n, _ in counts), False


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
