"""A tapped resource across an agent restart, with a service watching the cluster: the new agent
knows no device yet, and the kubelet does not offer an unhealthy one, so the kubelet's view
alone, reported before the plugin's own list, would say that device may be gone."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from core.webhook_receiver import WebhookReceiver

from .conftest import RunningService
from .fakes import SlowDevicePlugin
from .helpers import DONGLE, Api, Process, SimNode, agent_process, wait_until

pytestmark = pytest.mark.slow

# Under the tap's first-message timeout (5 s), and long enough that the restarted agent's
# first kubelet view reaches the service before the plugin's list does.
FIRST_MESSAGE_DELAY_SECONDS = 3.0


def plugin_socket(root: Path) -> Path:
    sockets = [p for p in (root / "device-plugins").glob("*.sock") if p.name != "kubelet.sock"]
    assert len(sockets) == 1, sockets
    return sockets[0]


def test_a_restarted_agent_keeps_a_tapped_unhealthy_device_present_and_its_alert(
    watching_service: RunningService,
    receiver: WebhookReceiver,
    cluster: Path,
    sim_node: Callable[..., SimNode],
    start_agent: Callable[..., Process],
    api_for: Callable[[RunningService], Api],
    node_name: str,
    work_dir: Path,
) -> None:
    node = sim_node([f"{DONGLE}:3"], None, "--node", node_name, "--kubeconfig", str(cluster))
    plugin = SlowDevicePlugin(work_dir / "slow.sock", plugin_socket(node.root), 0.0)
    plugin.start()
    try:
        api = api_for(watching_service)
        token = watching_service.service.create_token("agent", "ingest", node=node_name)
        token_file = work_dir / "token"
        token_file.write_text(token + "\n")
        args = ("--tap", f"{DONGLE}={plugin.path}", "--interval", "1", "--max-backoff", "2")
        first = agent_process(
            work_dir,
            node=node_name,
            server=watching_service.url,
            token_file=token_file,
            root=node.root,
            extra=args,
            name="agent-killed",
        )
        first.start()

        def dongle_1() -> tuple[object, object, object]:
            device = api.devices(node_name).get((DONGLE, "dongle-1"), {})
            return (device.get("state"), device.get("health"), device.get("health_source"))

        try:
            node.set_health(DONGLE, "dongle-1", "Unhealthy")
            wait_until(
                lambda: dongle_1() == ("present", "Unhealthy", "plugin"),
                message="dongle-1 Unhealthy, from the tap",
            )
            wait_until(
                lambda: ("DevicedeckDeviceUnhealthy", "dongle-1", "firing") in receiver.alerts(),
                message="dongle-1's alert",
            )
        finally:
            first.kill()  # the agent forgets every device it saw
        alerts_before = receiver.alerts()
        seen_events = {e["id"] for e in api.events(node_name)}

        plugin.first_message_delay = FIRST_MESSAGE_DELAY_SECONDS
        pod = node.create_pod("ml", "after-restart", {DONGLE: 1})
        start_agent(watching_service.url, token, node.root, *args)
        # While the new agent's tap waits for the plugin's first list, and after.
        seen: set[tuple[object, object, object]] = set()

        def restarted_agent_reported() -> bool:
            seen.add(dongle_1())
            held = {uid for _, _, uid in api.allocations(node_name).values()}
            return held == {pod["uid"]}

        wait_until(restarted_agent_reported, message="the restarted agent's report of the pods")
        deadline = time.monotonic() + FIRST_MESSAGE_DELAY_SECONDS + 2
        while time.monotonic() < deadline:
            seen.add(dongle_1())
            time.sleep(0.1)
        assert seen == {("present", "Unhealthy", "plugin")}

        # The restarted agent's tap streams: a change the plugin makes reaches the service.
        node.set_health(DONGLE, "dongle-2", "Unhealthy")
        wait_until(
            lambda: api.devices(node_name)[(DONGLE, "dongle-2")]["health"] == "Unhealthy",
            message="dongle-2 Unhealthy, from the new tap",
        )
        changes = [
            (e["kind"], e["device_id"])
            for e in api.events(node_name)
            if e["id"] not in seen_events and e["device_id"] == "dongle-1"
        ]
        assert changes == [], "dongle-1 did not change"
        assert [a for a in receiver.alerts() if a[1] == "dongle-1"] == [
            a for a in alerts_before if a[1] == "dongle-1"
        ]
    finally:
        plugin.stop()
