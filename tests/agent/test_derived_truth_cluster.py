"""Derived health against the truth, with real processes: a sim-node whose kubelet keeps its
Node's status in the simulated API server, an agent with no tap, and a service watching the
cluster. Devices that only flap are never removed, and an agent killed and restarted (it
forgets the devices it saw) neither removes a device nor resolves its alert."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from core.webhook_receiver import WebhookReceiver

from devicedeck.sim.plugin import device_id_for

from .conftest import RunningService
from .helpers import DONGLE, Api, Process, SimNode, agent_process, wait_until

pytestmark = pytest.mark.slow


def _synced(api: Api, node: str, capacity: int, allocatable: int) -> bool:
    detail = api.try_get(f"/api/v1/nodes/{node}")
    return bool(
        detail
        and detail["kube_synced_at"]
        and detail["capacity"].get(DONGLE) == str(capacity)
        and detail["allocatable"].get(DONGLE) == str(allocatable)
    )


def _dongles(api: Api, node: str) -> dict[str, dict[str, Any]]:
    return {d: found for (r, d), found in api.devices(node).items() if r == DONGLE}


def _fail_one_then_unplug_another(api: Api, node: SimNode, name: str) -> tuple[str, str]:
    """With six dongles offered: one fails, and once the service has it Unhealthy, another
    is unplugged and the service has it removed. Returns (failed, unplugged)."""
    ids = node.device_ids(DONGLE)
    failed, unplugged = ids[4], ids[5]
    wait_until(lambda: len(_dongles(api, name)) == 6, message="six dongles")
    node.set_health(DONGLE, failed, "Unhealthy")
    wait_until(
        lambda: (
            (d := _dongles(api, name).get(failed)) is not None
            and (d["presence"], d["health"]) == ("present", "Unhealthy")
        ),
        message=f"{failed} present and Unhealthy",
    )
    node.control({"op": "device.unplug", "resource": DONGLE, "device_id": unplugged})
    wait_until(
        lambda: _dongles(api, name).get(unplugged, {}).get("state") == "removed",
        message=f"{unplugged} removed",
    )
    return failed, unplugged


FAIL_AT_SECONDS = 25
UNPLUG_AT_SECONDS = 45


def test_devices_that_only_flap_are_never_removed(
    watching_service: RunningService,
    cluster: Path,
    sim_node: Callable[..., SimNode],
    start_agent: Callable[..., Process],
    api_for: Callable[[RunningService], Api],
    node_name: str,
) -> None:
    # The demo's story on a quick workload: pods hold dongles and healthy dongles flap every
    # few seconds, while #4 fails and later #5 is unplugged (the workload leaves those two be).
    node = sim_node(
        [f"{DONGLE}:6:dongle"],
        None,
        "--node",
        node_name,
        "--kubeconfig",
        str(cluster),
        "--workload",
        "5",
        "--workload-interval",
        "1",
        "--health-event",
        f"{DONGLE} {FAIL_AT_SECONDS} #4 Unhealthy",
        "--health-event",
        f"{DONGLE} {UNPLUG_AT_SECONDS} #5 unplug",
    )
    failed, unplugged = (
        device_id_for("dongle", i, resource=DONGLE, seed=0, node=node_name) for i in (4, 5)
    )
    token = watching_service.service.create_token("agent", "ingest", node=node_name)
    start_agent(watching_service.url, token, node.root, "--interval", "1")
    api = api_for(watching_service)
    wait_until(lambda: len(_dongles(api, node_name)) == 6, message="six dongles")

    # Watch while the workload flaps dongles, some of them held by pods.
    wrongly_removed: set[str] = set()
    flapped: set[str] = set()
    deadline = time.monotonic() + UNPLUG_AT_SECONDS + 20
    while time.monotonic() < deadline:
        for device_id, device in _dongles(api, node_name).items():
            if device_id != unplugged and device["state"] == "removed":
                wrongly_removed.add(device_id)
            if device_id not in (failed, unplugged) and device["health"] == "Unhealthy":
                flapped.add(device_id)
        time.sleep(0.5)
    assert flapped, "the workload flapped no dongle while watched"
    assert wrongly_removed == set(), [
        (e["at"], e["kind"], e["device_id"], e["actor"], e["after"])
        for e in api.events(node_name)
        if e["device_id"] in wrongly_removed or e["kind"] == "devices_counted"
    ]
    # The workload keeps the dongles still around the scripted unplug, so the counts name it
    # (a flap beside it would leave both undecided, and rightly).
    wait_until(
        lambda: (
            (d := _dongles(api, node_name)[failed])["presence"] == "present"
            and d["health"] == "Unhealthy"
            and _dongles(api, node_name)[unplugged]["state"] == "removed"
        ),
        timeout=180,
        message=f"{failed} Unhealthy and {unplugged} removed once the flaps allow",
    )
    removals = {e["device_id"] for e in api.events(node_name) if e["kind"] == "device_removed"}
    assert removals == {unplugged}


def _unhealthy_gauge(service: RunningService, node: str) -> int | None:
    try:
        text = httpx.get(f"{service.url}/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    pattern = (
        r'devicedeck_node_devices\{node="'
        + re.escape(node)
        + r'",resource="'
        + re.escape(DONGLE)
        + r'",health="Unhealthy"\} (\d+)'
    )
    found = re.search(pattern, text)
    return int(found.group(1)) if found else None


def test_an_agent_killed_and_restarted_keeps_the_truth_and_the_alerts(
    watching_service: RunningService,
    receiver: WebhookReceiver,
    cluster: Path,
    sim_node: Callable[..., SimNode],
    start_agent: Callable[..., Process],
    api_for: Callable[[RunningService], Api],
    node_name: str,
    work_dir: Path,
) -> None:
    node = sim_node([f"{DONGLE}:6:dongle"], None, "--node", node_name, "--kubeconfig", str(cluster))
    token = watching_service.service.create_token("agent", "ingest", node=node_name)
    token_file = work_dir / "token"
    token_file.write_text(token + "\n")
    first = agent_process(
        work_dir,
        node=node_name,
        server=watching_service.url,
        token_file=token_file,
        root=node.root,
        extra=("--interval", "1"),
        name="agent-killed",
    )
    first.start()
    api = api_for(watching_service)
    try:
        failed, unplugged = _fail_one_then_unplug_another(api, node, node_name)
        wait_until(
            lambda: (
                ("DevicedeckDeviceUnhealthy", failed, "firing") in receiver.alerts()
                and ("DevicedeckDeviceRemoved", unplugged, "firing") in receiver.alerts()
            ),
            message="the failure and the removal alerted",
        )
        # Not offered before the Node's status caught up, the unplugged dongle may have
        # alerted as unhealthy first: its removal then ends that alert.
        wait_until(
            lambda: (
                (("DevicedeckDeviceUnhealthy", unplugged, "firing") in receiver.alerts())
                == (("DevicedeckDeviceUnhealthy", unplugged, "resolved") in receiver.alerts())
            ),
            message="the unplugged dongle's Unhealthy alert, if any, ended",
        )
        wait_until(
            lambda: _unhealthy_gauge(watching_service, node_name) == 1,
            message="one Unhealthy dongle in /metrics",
        )
        alerts_before = receiver.alerts()
        seen_events = {e["id"] for e in api.events(node_name)}
    finally:
        first.kill()  # the agent forgets every device it saw

    start_agent(watching_service.url, token, node.root, "--interval", "1")
    # Proof that the new agent reports: a pod it alone can tell the service about.
    node.create_pod("default", "after-restart", {DONGLE: 1})
    wait_until(
        lambda: any(
            a.get("pod") == "after-restart"
            for d in _dongles(api, node_name).values()
            if (a := d.get("allocation"))
        ),
        message="the restarted agent's pod",
    )
    # Several rounds of the new agent's snapshots.
    time.sleep(5)
    after = _dongles(api, node_name)
    assert (after[failed]["presence"], after[failed]["health"]) == ("present", "Unhealthy")
    assert after[unplugged]["state"] == "removed"
    new_events = [e for e in api.events(node_name) if e["id"] not in seen_events]
    device_changes = [
        (e["kind"], e["device_id"])
        for e in new_events
        if e["kind"] in ("device_removed", "device_reappeared", "health_changed")
    ]
    assert device_changes == []
    assert receiver.alerts() == alerts_before
    assert _unhealthy_gauge(watching_service, node_name) == 1
