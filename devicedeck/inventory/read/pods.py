"""Pods that hold or held devices: pod -> containers -> devices (plugin and DRA), newest first.

A pod is known by (namespace, name) from three sources: the device-plugin holds and the DRA
claims the node agents report (`allocations`, `claim_allocations`), and, with cluster access,
live pods whose ResourceClaims the API server allocated to them, which no agent may report
(a kubelet's PodResources lists claims only with its DRA support). A pod runs while one of
them says it holds something now; otherwise it finished, at its last release.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Text,
    case,
    cast,
    exists,
    func,
    literal,
    null,
    or_,
    select,
    tuple_,
    union_all,
)
from sqlalchemy.orm import Session

from devicedeck.clock import iso
from devicedeck.inventory.cluster.models import DraClaim, DraClaimDevice, KubePod
from devicedeck.inventory.dra.pods import TERMINAL_PHASES, owner_of, pods_dra
from devicedeck.inventory.errors import InvalidInput, Problem
from devicedeck.inventory.models import Allocation, ClaimAllocation, Device, Node
from devicedeck.inventory.read.freshness import Freshness
from devicedeck.inventory.read.pagination import (
    Keyset,
    Page,
    after_newest_first,
    bounded_count,
    check_limit,
    decode_cursor,
)
from devicedeck.inventory.read.queries import canonical_choice, effective_health

RUNNING = "running"
FINISHED = "finished"
ANY_STATE = "any"
POD_STATES = (RUNNING, FINISHED, ANY_STATE)
CURSOR_SORT = "pod_newest"


@dataclass(frozen=True)
class PodFilters:
    namespace: str | None = None
    node: str | None = None
    q: str | None = None
    state: str = ANY_STATE


def _held_through_claims() -> Any:
    """A live pod's ResourceClaim is allocated and reserved for it, with a device it holds
    (not only watches with admin access). reservedFor names the pod by UID; a UID is unique,
    so finding it in the stored list's text is finding the pod."""
    return (
        exists()
        .where(
            DraClaim.namespace == KubePod.namespace,
            DraClaim.allocated.is_(True),
            cast(DraClaim.reserved_for, Text).contains(KubePod.uid),
            DraClaimDevice.claim_id == DraClaim.id,
            DraClaimDevice.admin_access.is_(False),
        )
        .correlate(KubePod)
    )


def _parts(filters: PodFilters) -> list[Any]:
    """Per source, a row per pod: (namespace, pod, latest start, 1 if it holds something now,
    latest end)."""
    parts: list[Any] = []
    for table in (Allocation, ClaimAllocation):
        part = select(
            table.namespace.label("namespace"),
            table.pod.label("pod"),
            func.max(table.started).label("started"),
            func.max(case((table.ended.is_(None), 1), else_=0)).label("open"),
            func.max(table.ended).label("ended"),
        ).group_by(table.namespace, table.pod)
        if filters.node is not None:
            node_id = select(Node.id).where(Node.name == filters.node).scalar_subquery()
            part = part.where(table.node_id == node_id)
        if filters.namespace is not None:
            part = part.where(table.namespace == filters.namespace)
        if filters.q:
            part = part.where(table.pod.contains(filters.q, autoescape=True))
        parts.append(part)
    cluster = select(
        KubePod.namespace,
        KubePod.name,
        func.coalesce(KubePod.created_at, KubePod.first_seen),
        literal(1),
        null(),
    ).where(
        KubePod.deleted_at.is_(None),
        KubePod.node.is_not(None),
        or_(KubePod.phase.is_(None), KubePod.phase.not_in(TERMINAL_PHASES)),
        _held_through_claims(),
    )
    if filters.node is not None:
        cluster = cluster.where(KubePod.node == filters.node)
    if filters.namespace is not None:
        cluster = cluster.where(KubePod.namespace == filters.namespace)
    if filters.q:
        cluster = cluster.where(KubePod.name.contains(filters.q, autoescape=True))
    parts.append(cluster)
    return parts


def _pods(filters: PodFilters) -> Any:
    """One row per pod over the sources, in the state asked for, as a subquery."""
    each = union_all(*_parts(filters)).subquery("each")
    pods = select(
        each.c.namespace,
        each.c.pod,
        func.max(each.c.started).label("started"),
        func.max(each.c.open).label("open"),
        func.max(each.c.ended).label("ended"),
    ).group_by(each.c.namespace, each.c.pod)
    if filters.state == RUNNING:
        pods = pods.having(func.max(each.c.open) == 1)
    elif filters.state == FINISHED:
        pods = pods.having(func.max(each.c.open) == 0)
    return pods.subquery("pods")


def list_pods(
    session: Session,
    filters: PodFilters,
    clock: Freshness,
    *,
    cursor: str | None = None,
    limit: int = 50,
) -> Page[dict[str, Any]]:
    """Pods newest first (by their latest hold's start), then by namespace and name."""
    check_limit(limit)
    state = canonical_choice(filters.state, POD_STATES)
    if state not in POD_STATES:
        raise InvalidInput(
            f"state must be one of {', '.join(POD_STATES)}",
            [Problem("state", "enum", f"must be one of {', '.join(POD_STATES)}")],
        )
    pods = _pods(replace(filters, state=state))
    query = select(pods.c.namespace, pods.c.pod, pods.c.started, pods.c.open, pods.c.ended)
    if cursor:
        values = decode_cursor(cursor, CURSOR_SORT, 3)
        query = query.where(
            after_newest_first(pods.c.started, [pods.c.namespace, pods.c.pod], values)
        )
    rows = session.execute(
        query.order_by(pods.c.started.desc(), pods.c.namespace, pods.c.pod).limit(limit + 1)
    ).all()
    page, next_cursor = Keyset(CURSOR_SORT, []).cut(
        rows, limit, lambda row: [iso(row.started), row.namespace, row.pod]
    )
    count, exact = bounded_count(session, select(pods.c.namespace))
    items = _pods_with_devices(session, page, clock)
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


def _shown(row: Any, ended: datetime | None) -> bool:
    """Whether a hold is shown with its pod: a running pod's current holds, a finished pod's
    holds that ended at its last release."""
    if row.open:
        return ended is None
    return ended is not None and ended == row.ended


def _pods_with_devices(session: Session, rows: list[Any], clock: Freshness) -> list[dict[str, Any]]:
    if not rows:
        return []
    by_pair = {(row.namespace, row.pod): row for row in rows}
    pairs = list(by_pair)
    health = effective_health(clock)
    plugin_rows = session.execute(
        select(Allocation, Node.name, Device.numa_nodes, health.label("health"))
        .join(Node, Node.id == Allocation.node_id)
        .join(Device, Device.id == Allocation.device_pk)
        .where(tuple_(Allocation.namespace, Allocation.pod).in_(pairs))
        .order_by(Allocation.container, Allocation.resource, Allocation.device_id, Allocation.id)
    ).all()
    claim_rows = session.execute(
        select(ClaimAllocation, Node.name)
        .join(Node, Node.id == ClaimAllocation.node_id)
        .where(tuple_(ClaimAllocation.namespace, ClaimAllocation.pod).in_(pairs))
        .order_by(
            ClaimAllocation.container,
            ClaimAllocation.driver,
            ClaimAllocation.device,
            ClaimAllocation.id,
        )
    ).all()
    pods: dict[tuple[str, str], dict[str, Any]] = {}
    containers: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)

    def pod_entry(key: tuple[str, str]) -> dict[str, Any]:
        row = by_pair[key]
        return pods.setdefault(
            key,
            {
                "namespace": key[0],
                "name": key[1],
                "uid": None,
                "nodes": [],
                "running": bool(row.open),
                "started": iso(row.started),
                "ended": None if row.open else iso(row.ended),
                "owner": None,
                "dra_devices": [],
            },
        )

    def container_of(key: tuple[str, str], node: str, name: str) -> dict[str, Any]:
        entry = pod_entry(key)
        if node not in entry["nodes"]:
            entry["nodes"].append(node)
        return containers[key].setdefault(name, {"name": name, "devices": [], "claims": []})

    for allocation, node_name, numa, device_health in plugin_rows:
        key = (allocation.namespace, allocation.pod)
        if not _shown(by_pair[key], allocation.ended):
            continue
        container = container_of(key, node_name, allocation.container)
        if allocation.pod_uid:
            pods[key]["uid"] = allocation.pod_uid
        container["devices"].append(
            {
                "id": allocation.device_pk,
                "resource": allocation.resource,
                "device_id": allocation.device_id,
                "health": device_health,
                "numa_nodes": list(numa),
                "started": iso(allocation.started),
                "ended": iso(allocation.ended),
            }
        )
    for claim, node_name in claim_rows:
        key = (claim.namespace, claim.pod)
        if not _shown(by_pair[key], claim.ended):
            continue
        container = container_of(key, node_name, claim.container)
        container["claims"].append({**claim_summary(claim), "ended": iso(claim.ended)})
    _add_cluster_pods(session, by_pair, pod_entry)
    result = []
    for key in pairs:
        pod = pod_entry(key)
        if not pod["nodes"]:
            continue  # its holds are gone since the page's read (a node deleted meanwhile)
        pod["node"] = pod["nodes"][0]
        pod["containers"] = [containers[key][name] for name in sorted(containers[key])]
        result.append(pod)
    return result


def _add_cluster_pods(
    session: Session, by_pair: dict[tuple[str, str], Any], pod_entry: Any
) -> None:
    """What the API server knows of the listed pods: the owner and UID of each, and for a
    running pod whose claims the agents did not report, the devices its claims hold."""
    found: dict[tuple[str, str], KubePod] = {}
    for pod in session.scalars(
        select(KubePod)
        .where(tuple_(KubePod.namespace, KubePod.name).in_(list(by_pair)))
        # The live pod of a name, else the one deleted last.
        .order_by(KubePod.deleted_at.is_not(None).desc(), KubePod.id)
    ):
        found[(pod.namespace, pod.name)] = pod
    claimed = [
        pod
        for key, pod in found.items()
        if by_pair[key].open and pod.deleted_at is None and pod.claims and pod.node
    ]
    dra = pods_dra(session, claimed) if claimed else {}
    for key, pod in found.items():
        entry = pod_entry(key)
        entry["owner"] = owner_of(pod)
        entry["uid"] = entry["uid"] or pod.uid
        held = [d for d in dra.get(pod.uid, {}).get("dra_devices", []) if not d["admin_access"]]
        if held:
            entry["dra_devices"] = held
            if pod.node not in entry["nodes"]:
                entry["nodes"].append(pod.node)
