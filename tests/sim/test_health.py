"""Device health reaching the kubelet, and what happens when a plugin dies."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from devicedeck.kubelet.checkpoint import read_checkpoint
from devicedeck.sim.kubelet import AdmissionError, ContainerSpec, SimKubelet

from .helpers import RecordingPlugin, allocatable, device_entries, wait_until

DONGLE = "example.com/dongle"


def test_health_change_reaches_capacity_and_allocatable(
    root: Path,
    start_kubelet: Callable[..., SimKubelet],
    start_plugin: Callable[..., RecordingPlugin],
) -> None:
    kubelet = start_kubelet()
    plugin = start_plugin(DONGLE, 3)
    wait_until(lambda: kubelet.manager.allocatable() == {DONGLE: 3})

    plugin.set_health("d1", "Unhealthy")
    wait_until(lambda: kubelet.manager.allocatable() == {DONGLE: 2})
    assert kubelet.manager.capacity() == {DONGLE: 3}
    assert device_entries(allocatable(root).devices) == {(DONGLE, "d0", None), (DONGLE, "d2", None)}

    plugin.set_health("d1", "Healthy")
    wait_until(lambda: kubelet.manager.allocatable() == {DONGLE: 3})


def test_any_health_other_than_healthy_counts_as_unhealthy(
    start_kubelet: Callable[..., SimKubelet], start_plugin: Callable[..., RecordingPlugin]
) -> None:
    kubelet = start_kubelet()
    plugin = start_plugin(DONGLE, 2)
    plugin.set_health("d0", "Degraded")

    wait_until(lambda: kubelet.manager.allocatable() == {DONGLE: 1})
    assert [d.health for d in kubelet.manager.devices(DONGLE)] == ["Degraded", "Healthy"]


def test_plugin_death_marks_devices_unhealthy_then_capacity_zero_after_grace(
    root: Path,
    start_kubelet: Callable[..., SimKubelet],
    start_plugin: Callable[..., RecordingPlugin],
) -> None:
    # Long enough that the checks made during the grace period finish inside it on a busy
    # machine.
    grace = 5.0
    kubelet = start_kubelet(grace_seconds=grace)
    plugin = start_plugin(DONGLE, 2)
    wait_until(lambda: kubelet.manager.allocatable() == {DONGLE: 2})

    # Taken before the stop: the kubelet may see the endpoint go (and start the grace timer)
    # before stop() returns.
    stopped = time.monotonic()
    plugin.stop(grace=0)

    wait_until(lambda: kubelet.manager.allocatable() == {DONGLE: 0})
    assert kubelet.manager.capacity() == {DONGLE: 2}
    assert {d.health for d in kubelet.manager.devices(DONGLE)} == {"Unhealthy"}
    assert read_checkpoint(kubelet.paths.checkpoint).registered_devices == {DONGLE: []}
    with pytest.raises(AdmissionError, match="not connected"):
        kubelet.create_pod("default", "late", [ContainerSpec("main", {DONGLE: 1})])

    wait_until(lambda: kubelet.manager.capacity() == {DONGLE: 0})
    assert time.monotonic() - stopped >= grace
    assert kubelet.manager.devices(DONGLE) == []
    assert kubelet.node_status()["resources"][DONGLE]["capacity"] == 0
    assert read_checkpoint(kubelet.paths.checkpoint).registered_devices == {}
    assert allocatable(root).devices == []
