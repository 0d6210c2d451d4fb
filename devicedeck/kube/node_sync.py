"""Node objects from the API server -> the capacity, allocatable, labels, conditions, taints and
schedulability (cordoned or not) of nodes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from devicedeck.inventory.events import EventLog
from devicedeck.inventory.models import Node
from devicedeck.inventory.write.node_lock import lock_node
from devicedeck.inventory.write.other_writers import reconsider_derived_devices

ACTOR = "kube-watcher"
CONDITION_FIELDS = ("type", "status", "reason", "message", "lastTransitionTime")
TAINT_FIELDS = ("key", "value", "effect", "timeAdded")


def node_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The columns a Node object fills. Heartbeat times are left out: they change every few
    minutes without anything happening, and would turn every resync into a write."""
    status = obj.get("status") or {}
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    return {
        "capacity": dict(status.get("capacity") or {}),
        "allocatable": dict(status.get("allocatable") or {}),
        "labels": dict(metadata.get("labels") or {}),
        "conditions": [
            {key: condition.get(key) for key in CONDITION_FIELDS}
            for condition in status.get("conditions") or []
            if isinstance(condition, dict)
        ],
        "unschedulable": spec.get("unschedulable") is True,
        "taints": [
            {key: taint.get(key) for key in TAINT_FIELDS if taint.get(key) is not None}
            for taint in spec.get("taints") or []
            if isinstance(taint, dict)
        ],
    }


def apply_node(session: Session, obj: dict[str, Any], now: datetime, log: EventLog) -> Node:
    """Store a node's status; the row is created (with a node_added event) if the node is new."""
    node = lock_node(session, obj["metadata"]["name"], now, log)
    fields = node_fields(obj)
    if node.kube_synced_at is None or any(getattr(node, k) != v for k, v in fields.items()):
        counts_changed = node.kube_synced_at is None or any(
            getattr(node, k) != fields[k] for k in ("capacity", "allocatable")
        )
        for key, value in fields.items():
            setattr(node, key, value)
        node.kube_synced_at = now
        if counts_changed:
            reconsider_derived_devices(session, node, now, log)
    return node


def forget_node(session: Session, name: str, now: datetime, log: EventLog) -> None:
    """The node left the cluster: its rows stay, but nothing from the API server is shown, and
    its derived devices lose the status's evidence."""
    node = session.scalars(select(Node).where(Node.name == name).with_for_update()).one_or_none()
    if node is None or node.kube_synced_at is None:
        return
    node.capacity = None
    node.allocatable = None
    node.labels = None
    node.conditions = None
    node.unschedulable = None
    node.taints = None
    node.kube_synced_at = None
    reconsider_derived_devices(session, node, now, log)


def apply_node_event(session: Session, event_type: str, obj: dict[str, Any], now: datetime) -> None:
    log = EventLog(at=now, actor=ACTOR)
    if event_type == "DELETED":
        forget_node(session, obj["metadata"]["name"], now, log)
    else:
        apply_node(session, obj, now, log)
    log.write(session)


def apply_node_list(session: Session, items: list[dict[str, Any]], now: datetime) -> None:
    log = EventLog(at=now, actor=ACTOR)
    names = set()
    for obj in items:
        names.add(apply_node(session, obj, now, log).name)
    gone = session.scalars(
        select(Node.name).where(Node.kube_synced_at.is_not(None)).order_by(Node.name)
    )
    for name in [n for n in gone if n not in names]:
        forget_node(session, name, now, log)
    log.write(session)
