"""sim-node + agent + service, all real processes: what the node has shows in the API."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from .conftest import RunningService, start_service
from .helpers import (
    DONGLE,
    GPU,
    Api,
    Process,
    SimNode,
    counts,
    free_port,
    wait_until,
)

pytestmark = pytest.mark.slow

PLUGINS = [f"{GPU}:8:gpu", f"{DONGLE}:2"]


def health_of(api: Api, node: str, resource: str, device: str) -> tuple[str, str] | None:
    found = api.devices(node).get((resource, device))
    return (found["health"], found["health_source"]) if found else None


def test_devices_pods_and_health_reach_the_service(
    shared_service: RunningService,
    sim_node: Callable[..., SimNode],
    start_agent: Callable[..., Process],
    api_for: Callable[[RunningService], Api],
    node_name: str,
) -> None:
    node = sim_node(PLUGINS)
    trainer = node.create_pod("ml", "trainer", {GPU: 2})
    api = api_for(shared_service)
    metrics_port = free_port()
    start_agent(
        shared_service.url,
        shared_service.ingest_token,
        node.root,
        "--tap",
        DONGLE,
        "--interval",
        "2",
        "--metrics-port",
        str(metrics_port),
        "--metrics-address",
        "127.0.0.1",
    )

    # Until the tap's first snapshot, the dongles' health is derived from the kubelet's view.
    wait_until(
        lambda: (
            counts(api, node_name) == (10, 2)
            and {d["health_source"] for (r, _), d in api.devices(node_name).items() if r == DONGLE}
            == {"plugin"}
        ),
        message="devices, pods, and the tapped plugin's own health",
    )

    status = node.control({"op": "node.status"})["resources"]
    devices = api.devices(node_name)
    for resource, source in ((GPU, "derived"), (DONGLE, "plugin")):
        for device in status[resource]["devices"]:
            seen = devices[(resource, device["id"])]
            assert (seen["health"], seen["health_source"]) == ("Healthy", source)
            assert seen["numa_nodes"] == device["numa_nodes"]
    held = trainer["containers"][0]["devices"][GPU]["device_ids"]
    assert api.allocations(node_name) == {(GPU, d): ("ml", "trainer", trainer["uid"]) for d in held}

    # A pod created and deleted through sim-ctl shows, and so does its release.
    node.sim_ctl("pod", "create", "ml/eval", "--request", f"{DONGLE}=1", "--request", f"{GPU}=1")
    wait_until(
        lambda: {p for _, p, _ in api.allocations(node_name).values()} == {"trainer", "eval"},
        message="the new pod",
    )
    node.sim_ctl("pod", "delete", "ml/trainer")
    wait_until(
        lambda: {p for _, p, _ in api.allocations(node_name).values()} == {"eval"},
        message="the deleted pod's devices released",
    )

    # A tapped plugin's health flap shows, marked as coming from the plugin.
    for health in ("Unhealthy", "Healthy"):
        node.set_health(DONGLE, "dongle-1", health)
        wait_until(
            lambda h=health: health_of(api, node_name, DONGLE, "dongle-1") == (h, "plugin"),
            message=f"dongle-1 {health}",
        )

    # Untapped: a device leaving allocatable shows as Unhealthy, derived; an unplugged one
    # stays listed as Unhealthy instead of disappearing.
    sick, pulled = status[GPU]["devices"][5]["id"], status[GPU]["devices"][6]["id"]
    node.set_health(GPU, sick, "Unhealthy")
    node.control({"op": "device.unplug", "resource": GPU, "device_id": pulled})
    for device in (sick, pulled):
        wait_until(
            lambda d=device: health_of(api, node_name, GPU, d) == ("Unhealthy", "derived"),
            message=f"{device} Unhealthy (derived)",
        )
    assert api.devices(node_name)[(GPU, pulled)]["state"] == "present"
    # Without the Node's status (no cluster access) the service cannot tell which, and says so.
    for device in (sick, pulled):
        detail = api.devices(node_name)[(GPU, device)]["health_detail"]
        assert detail.startswith("Not offered by the kubelet: may be unhealthy or removed")

    health = httpx.get(f"http://127.0.0.1:{metrics_port}/healthz", timeout=5).json()
    assert health["status"] == "ok" and health["taps_connected"] == [DONGLE]
    metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
    assert 'devicedeck_agent_snapshots_sent_total{kind="podresources"}' in metrics
    assert "devicedeck_agent_last_success_timestamp_seconds 1." in metrics
    assert 'devicedeck_agent_tap_connected{resource="example.com/dongle"} 1.0' in metrics


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_end_to_end_on_postgresql(
    database_url: str,
    work_dir: Path,
    sim_node: Callable[..., SimNode],
    start_agent: Callable[..., Process],
    api_for: Callable[[RunningService], Api],
    node_name: str,
) -> None:
    running = start_service(database_url, work_dir)
    try:
        node = sim_node(PLUGINS)
        node.create_pod("ml", "trainer", {GPU: 1, DONGLE: 1})
        api = api_for(running)
        start_agent(running.url, running.ingest_token, node.root, "--interval", "2")
        wait_until(lambda: counts(api, node_name) == (10, 2), message="devices")
        node.create_pod("ml", "second", {GPU: 2})
        wait_until(lambda: len(api.allocations(node_name)) == 4, message="the second pod")
        kinds = [e["kind"] for e in api.events(node_name)]
        assert kinds.count("allocated") == 4
        assert kinds.count("device_added") == 10
    finally:
        running.service.stop()


def test_a_pods_end_shows_without_waiting_for_the_full_reread(
    shared_service: RunningService,
    sim_node: Callable[..., SimNode],
    start_agent: Callable[..., Process],
    api_for: Callable[[RunningService], Api],
    node_name: str,
) -> None:
    """The kubelet writes nothing when a pod ends; the agent asks it for its pods often
    enough on its own that the release shows, here with a full re-read an hour away."""
    node = sim_node([f"{GPU}:4"])
    api = api_for(shared_service)
    start_agent(shared_service.url, shared_service.ingest_token, node.root, "--interval", "3600")
    wait_until(lambda: counts(api, node_name) == (4, 0), message="the node's devices")
    node.create_pod("ml", "job", {GPU: 2})
    wait_until(lambda: counts(api, node_name) == (4, 2), message="the pod's devices held")
    node.delete_pod("ml", "job")
    wait_until(lambda: counts(api, node_name) == (4, 0), message="the pod's devices released")
