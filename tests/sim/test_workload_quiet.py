"""Around a scripted plug or unplug, the workload keeps that resource's devices still: the
Node's counts can name the device that went only when nothing else changed with it, and the
demo's story (one dongle fails, later another is pulled out) must be told right."""

from __future__ import annotations

from pathlib import Path

from devicedeck.kubelet.deviceplugin import UNHEALTHY
from devicedeck.sim.node import PluginSpec, SimNode, parse_node_health_event
from devicedeck.sim.workload import QUIET_SECONDS

from .helpers import wait_until

DONGLE = "example.com/dongle"
STEPS = 40


def flaps(root: Path, *events: str) -> int:
    """How many times a dongle turned Unhealthy over STEPS workload steps taken at once."""
    health_events = [parse_node_health_event(e) for e in events]
    specs = [PluginSpec(DONGLE, 6, "dongle")]
    with SimNode(
        root, specs, workload_seed=3, workload_interval=3600, health_events=health_events
    ) as node:
        workload = node.workload
        assert workload is not None
        plugin = node.plugins[DONGLE]
        wait_until(lambda: node.kubelet.manager.allocatable() == {DONGLE: 6})
        turned = 0
        unhealthy: set[str] = set()
        for _ in range(STEPS):
            workload.step()
            now = {d.id for d in plugin.devices() if d.health == UNHEALTHY}
            turned += len(now - unhealthy)
            unhealthy = now
        if events:
            # Every step fell inside the quiet, or the count says nothing.
            assert workload.quiet(DONGLE)
        return turned


def test_no_flap_near_a_scripted_unplug(root: Path) -> None:
    assert flaps(root / "free") > 0
    # The unplug comes QUIET_SECONDS - 1 after the start: the workload is quiet from the start.
    unplug = f"{DONGLE} {QUIET_SECONDS - 1:g} #5 unplug"
    assert flaps(root / "quiet", unplug) == 0
