"""Derived health with the simulated cluster, all real processes but the API server: a
sim-node whose kubelet keeps its Node's status in the simulated API server, an agent with no
tap, and a service watching the cluster. The Node's status tells an unplugged device from an
unhealthy one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import RunningService
from .helpers import GPU, Api, Process, SimNode, wait_until

pytestmark = pytest.mark.slow


def _device(api: Api, node: str, device_id: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = api.devices(node).get((GPU, device_id))
    return found


def test_unplugged_is_removed_unhealthy_stays_and_a_device_plugged_back_returns(
    watching_service: RunningService,
    cluster: Path,
    sim_node: Callable[..., SimNode],
    start_agent: Callable[..., Process],
    api_for: Callable[[RunningService], Api],
    node_name: str,
) -> None:
    node = sim_node([f"{GPU}:4:gpu"], None, "--node", node_name, "--kubeconfig", str(cluster))
    token = watching_service.service.create_token("agent", "ingest", node=node_name)
    start_agent(watching_service.url, token, node.root, "--interval", "1")
    api = api_for(watching_service)
    sick, pulled = node.device_ids(GPU)[1], node.device_ids(GPU)[2]

    def synced(capacity: int, allocatable: int) -> bool:
        detail = api.try_get(f"/api/v1/nodes/{node_name}")
        return bool(
            detail
            and detail["kube_synced_at"]
            and detail["capacity"].get(GPU) == str(capacity)
            and detail["allocatable"].get(GPU) == str(allocatable)
        )

    wait_until(lambda: synced(4, 4), message="the node's status from the simulated kubelet")
    wait_until(lambda: len(api.devices(node_name)) == 4, message="four GPUs")

    node.set_health(GPU, sick, "Unhealthy")
    wait_until(lambda: synced(4, 3), message="allocatable 3, capacity still 4")
    wait_until(
        lambda: (
            (d := _device(api, node_name, sick)) is not None
            and (d["state"], d["health"]) == ("present", "Unhealthy")
            and "counts 1 of its 4" in (d["health_detail"] or "")
        ),
        message=f"{sick} present and Unhealthy, counted by the Node's status",
    )

    node.control({"op": "device.unplug", "resource": GPU, "device_id": pulled})
    wait_until(lambda: synced(3, 2), message="capacity 3 after the unplug")
    wait_until(
        lambda: (d := _device(api, node_name, pulled)) is not None and d["state"] == "removed",
        message=f"{pulled} removed",
    )
    device = _device(api, node_name, sick)
    assert device is not None and (device["state"], device["health"]) == ("present", "Unhealthy")

    node.control({"op": "device.plug", "resource": GPU, "device_id": pulled})
    wait_until(
        lambda: (
            (d := _device(api, node_name, pulled)) is not None
            and (d["state"], d["health"]) == ("present", "Healthy")
        ),
        message=f"{pulled} back, Healthy",
    )
    kinds = [
        (e["kind"], e["device_id"])
        for e in api.events(node_name)
        if e["kind"] in ("device_removed", "device_reappeared")
    ]
    assert (("device_removed", pulled) in kinds) and (("device_reappeared", pulled) in kinds)
    assert ("device_removed", sick) not in kinds
