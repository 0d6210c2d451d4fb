"""A node's state in Kubernetes as an operator reads it: Ready or not, cordoned or not, the
conditions that report trouble, and its taints; from what the cluster watcher stored.

Ready is the status of the node's Ready condition: True, False, or Unknown when the node
controller has heard nothing from the kubelet for a while (or when the node has no Ready
condition at all). The pressure conditions (MemoryPressure, DiskPressure, PIDPressure) and
NetworkUnavailable report trouble when True. `status` reads as `kubectl get nodes` shows it.
"""

from __future__ import annotations

from typing import Any

from devicedeck.inventory.models import Node

TROUBLE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
READY_WORDS = {"True": "Ready", "False": "NotReady"}


def kube_node_state(node: Node) -> dict[str, Any] | None:
    """None while the service has not read the node from the cluster."""
    if node.kube_synced_at is None:
        return None
    conditions = {
        c.get("type"): c for c in node.conditions or [] if isinstance(c, dict) and c.get("type")
    }
    ready_condition = conditions.get("Ready") or {}
    ready = str(ready_condition.get("status") or "Unknown")
    unschedulable = bool(node.unschedulable)
    words = [READY_WORDS.get(ready, "Unknown")]
    if unschedulable:
        words.append("SchedulingDisabled")
    return {
        "status": ",".join(words),
        "ready": ready,
        "ready_reason": ready_condition.get("reason"),
        "ready_message": ready_condition.get("message"),
        "ready_since": ready_condition.get("lastTransitionTime"),
        "unschedulable": unschedulable,
        "trouble": [
            kind
            for kind in TROUBLE_CONDITIONS
            if (conditions.get(kind) or {}).get("status") == "True"
        ],
        "taints": [
            {
                "key": str(t.get("key", "")),
                "value": t.get("value") or None,
                "effect": str(t.get("effect", "")),
                "time_added": t.get("timeAdded"),
            }
            for t in node.taints or []
            if isinstance(t, dict)
        ],
    }
