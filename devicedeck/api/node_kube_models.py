"""The `kubernetes` field of a node in /api/v1/nodes and /api/v1/nodes/{name}: its state as
the cluster watcher last read it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from devicedeck.api.examples import EARLIER, example, example_of


class NodeTaintOut(BaseModel):
    model_config = example(
        {
            "key": "node.kubernetes.io/unschedulable",
            "value": None,
            "effect": "NoSchedule",
            "time_added": None,
        }
    )

    key: str
    value: str | None
    effect: str = Field(description="NoSchedule, PreferNoSchedule or NoExecute")
    time_added: str | None = Field(description="when a NoExecute taint was added")


class NodeKubeStateOut(BaseModel):
    model_config = example(
        {
            "status": "Ready,SchedulingDisabled",
            "ready": "True",
            "ready_reason": "KubeletReady",
            "ready_message": "kubelet is posting ready status",
            "ready_since": EARLIER,
            "unschedulable": True,
            "trouble": [],
            "taints": [example_of(NodeTaintOut)],
        }
    )

    status: str = Field(
        description="as `kubectl get nodes` shows it: Ready, NotReady or Unknown, then "
        "SchedulingDisabled when the node is cordoned"
    )
    ready: Literal["True", "False", "Unknown"] = Field(
        description="the Ready condition's status; Unknown when the node controller stopped "
        "hearing from the kubelet, or when the node has no Ready condition"
    )
    ready_reason: str | None
    ready_message: str | None
    ready_since: str | None = Field(description="when the Ready condition last changed")
    unschedulable: bool = Field(
        description="cordoned (spec.unschedulable): no new pods are scheduled on the node"
    )
    trouble: list[str] = Field(
        description="conditions that are True and mean trouble: MemoryPressure, DiskPressure, "
        "PIDPressure, NetworkUnavailable"
    )
    taints: list[NodeTaintOut] = Field(description="spec.taints, the node controllers' too")
