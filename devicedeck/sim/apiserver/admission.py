"""What the API server and its controllers add to an object as it is written.

A real cluster fills these in within moments of a write, some in the API server's admission
(a namespace's name label, a new pod's Pending phase) and some in the controllers (the node
lifecycle controller's taints for a cordoned node and for conditions that are not well);
with no controllers here, the server does it in the same write, so a client reads what it
would read from a real cluster a moment later.
"""

from __future__ import annotations

from typing import Any

from devicedeck.sim.apiserver.resources import Resource

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
# (condition, status) -> the taint the node lifecycle controller puts on such a node.
CONDITION_TAINTS = {
    ("Ready", "False"): "node.kubernetes.io/not-ready",
    ("Ready", "Unknown"): "node.kubernetes.io/unreachable",
    ("MemoryPressure", "True"): "node.kubernetes.io/memory-pressure",
    ("DiskPressure", "True"): "node.kubernetes.io/disk-pressure",
    ("PIDPressure", "True"): "node.kubernetes.io/pid-pressure",
    ("NetworkUnavailable", "True"): "node.kubernetes.io/network-unavailable",
}
MANAGED_TAINTS = [UNSCHEDULABLE_TAINT] + [
    {"key": key, "effect": "NoSchedule"} for key in CONDITION_TAINTS.values()
]
# Namespaces every cluster has; the first three cannot be deleted.
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
UNDELETABLE_NAMESPACES = ("default", "kube-system", "kube-public")


def namespace_object(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def on_create(resource: Resource, obj: dict[str, Any], *, keep_status: bool = False) -> None:
    """Defaults of a new object (changed in place)."""
    if resource.kind == "Pod" and not keep_status:
        # A new pod is Pending until its kubelet says otherwise.
        obj["status"] = {"phase": "Pending"}
    if resource.kind == "Namespace":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
    on_write(resource, obj)


def on_write(resource: Resource, obj: dict[str, Any]) -> None:
    """What every write of the object, new or not, is made to carry (changed in place)."""
    if resource.kind == "Namespace":
        labels = obj["metadata"].get("labels")
        labels = dict(labels) if isinstance(labels, dict) else {}
        labels[NAMESPACE_NAME_LABEL] = obj["metadata"]["name"]
        obj["metadata"]["labels"] = labels
    if resource.kind == "Node":
        _node_taints(obj)


def _managed_taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The NoSchedule taints the node controllers keep: one for a cordoned node, one for
    each condition that is not well (Ready False or Unknown, a pressure condition True)."""
    spec, status = node.get("spec"), node.get("status")
    wanted = []
    if isinstance(spec, dict) and spec.get("unschedulable") is True:
        wanted.append(UNSCHEDULABLE_TAINT["key"])
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for condition in conditions if isinstance(conditions, list) else []:
        if isinstance(condition, dict):
            key = CONDITION_TAINTS.get((str(condition.get("type")), str(condition.get("status"))))
            if key:
                wanted.append(key)
    return [{"key": key, "effect": "NoSchedule"} for key in wanted]


def _node_taints(node: dict[str, Any]) -> None:
    """Keeps the node's controller taints in step with its spec and conditions; the taints
    others set stay as they are."""
    spec = node.get("spec")
    if spec is not None and not isinstance(spec, dict):
        return  # validation refuses it
    spec = spec or {}
    taints = spec.get("taints")
    if taints is not None and not isinstance(taints, list):
        return
    managed = {t["key"] for t in MANAGED_TAINTS}
    kept = [
        t
        for t in taints or []
        if not (isinstance(t, dict) and t.get("key") in managed and t.get("effect") == "NoSchedule")
    ]
    kept += _managed_taints(node)
    if kept:
        node["spec"] = {**spec, "taints": kept}
    elif "taints" in spec:
        node["spec"] = {k: v for k, v in spec.items() if k != "taints"}
