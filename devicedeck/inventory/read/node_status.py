"""A node's details: plugins, the kubelet's allocatable sets, its status in Kubernetes, and
its extended resources as the API server counts them next to what the inventory knows.

The kubelet sets capacity = healthy + unhealthy devices and allocatable = healthy ones, so the
difference is what is unhealthy or lost; a plugin gone for good leaves capacity 0. Resources
advertised by hand (a JSON patch on node status) have no plugin and no device anywhere, and
are shown apart as counts only.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from devicedeck.clock import iso
from devicedeck.inventory.cluster.extended_resources import is_extended_resource, quantity
from devicedeck.inventory.dra.devices import dra_devices_of_node
from devicedeck.inventory.fields import HEALTHY, PRESENT
from devicedeck.inventory.models import Device, Node, NodeResource, PluginRegistration

DEVICE_PLUGIN = "device_plugin"
MANUAL = "manual"


def _plugin_backed(session: Session, node_id: int) -> tuple[set[str], dict[str, tuple[int, int]]]:
    """Resources a device plugin serves on the node, and present/healthy device counts."""
    counts = {
        resource: (int(present or 0), int(healthy or 0))
        for resource, present, healthy in session.execute(
            select(
                Device.resource,
                func.sum(case((Device.state == PRESENT, 1), else_=0)),
                func.sum(
                    case(((Device.state == PRESENT) & (Device.health == HEALTHY), 1), else_=0)
                ),
            )
            .where(Device.node_id == node_id)
            .group_by(Device.resource)
            .order_by(Device.resource)
        )
    }
    names = set(counts)
    names.update(
        session.scalars(
            select(PluginRegistration.resource).where(PluginRegistration.node_id == node_id)
        )
    )
    names.update(
        session.scalars(select(NodeResource.resource).where(NodeResource.node_id == node_id))
    )
    return names, counts


def extended_resources(session: Session, node: Node) -> list[dict[str, Any]]:
    """Per extended resource: capacity, allocatable, the difference, and where it comes from.
    Empty until the cluster watcher has seen the node."""
    if node.kube_synced_at is None:
        return []
    capacity = node.capacity or {}
    allocatable = node.allocatable or {}
    plugin_names, counts = _plugin_backed(session, node.id)
    names = {n for n in (*capacity, *allocatable) if is_extended_resource(n)} | plugin_names
    rows = []
    for name in sorted(names):
        cap = quantity(capacity[name]) if name in capacity else None
        alloc = quantity(allocatable[name]) if name in allocatable else None
        source = DEVICE_PLUGIN if name in plugin_names else MANUAL
        present, healthy = counts.get(name, (0, 0))
        unavailable = (cap or 0) - (alloc or 0) if cap is not None else None
        problem = _problem(source, cap, alloc, unavailable)
        rows.append(
            {
                "resource": name,
                "source": source,
                "capacity": cap,
                "allocatable": alloc,
                "unavailable": unavailable,
                "devices": present,
                "healthy_devices": healthy,
                # A hand-advertised resource waiting for the kubelet's copy is not degraded.
                "degraded": problem is not None and not (source == MANUAL and alloc is None),
                "problem": problem,
            }
        )
    return rows


def _problem(
    source: str, cap: int | None, alloc: int | None, unavailable: int | None
) -> str | None:
    if cap is None:
        return "not advertised in the node's status.capacity"
    if source == DEVICE_PLUGIN and cap == 0:
        return (
            "capacity is 0: the device plugin is gone (the kubelet keeps 0 for resources a "
            "plugin used to serve)"
        )
    if alloc is None and source == MANUAL:
        return "not in allocatable yet: the kubelet copies capacity to allocatable shortly"
    if unavailable:
        return f"{unavailable} of {cap} not allocatable: unhealthy, or lost"
    return None


def kube_node_details(session: Session, node: Node) -> dict[str, Any]:
    """What the cluster watcher adds to a node's details."""
    rows = extended_resources(session, node)
    return {
        "extended_resources": rows,
        "manual_extended_resources": [row for row in rows if row["source"] == MANUAL],
        "dra_devices": dra_devices_of_node(session, node.name),
    }


def node_details(session: Session, node: Node) -> dict[str, Any]:
    """What a node's page and /api/v1/nodes/NAME show beyond its device counts: plugins,
    the kubelet's allocatable sets, and the node's status in Kubernetes."""
    plugins = session.scalars(
        select(PluginRegistration)
        .where(PluginRegistration.node_id == node.id)
        .order_by(PluginRegistration.resource)
    )
    allocatable = session.scalars(
        select(NodeResource).where(NodeResource.node_id == node.id).order_by(NodeResource.resource)
    )
    return {
        "plugins": [
            {
                "resource": p.resource,
                "endpoint": p.endpoint,
                "api_version": p.api_version,
                "options": p.options,
                "first_seen": iso(p.first_seen),
                "last_seen": iso(p.last_seen),
            }
            for p in plugins
        ],
        "kubelet_allocatable": {r.resource: list(r.allocatable_device_ids) for r in allocatable},
        "capacity": node.capacity or {},
        "allocatable": node.allocatable or {},
        "labels": node.labels or {},
        "conditions": node.conditions or [],
        "kube_synced_at": iso(node.kube_synced_at),
        "undecided_devices": undecided_devices(node.derived_basis),
        **kube_node_details(session, node),
    }


def undecided_devices(derived_basis: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per derived resource whose Node counts cannot name the devices that went: how many of
    the devices `among` are unhealthy and how many removed
    (devicedeck/inventory/write/derived_health.py)."""
    found = []
    for resource, entry in sorted((derived_basis or {}).items()):
        summary = (entry or {}).get("summary")
        if summary:
            found.append({"resource": resource, **summary})
    return found
