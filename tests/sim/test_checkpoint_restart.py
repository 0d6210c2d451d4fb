"""The checkpoint the simulated kubelet writes, and what survives a kubelet restart."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from devicedeck.kubelet.checkpoint import read_checkpoint
from devicedeck.kubelet.deviceplugin import PluginDevice
from devicedeck.kubelet.paths import device_plugins_dir
from devicedeck.sim.kubelet import AdmissionError, ContainerSpec, SimKubelet

from .helpers import RecordingPlugin, device_entries, list_pods, wait_until

GPU = "example.com/gpu"
DONGLE = "example.com/dongle"


def gpu_devices() -> list[PluginDevice]:
    return [PluginDevice(f"g{i}", numa_nodes=(i // 2,)) for i in range(4)]


def test_checkpoint_written_in_kubelet_shape_after_allocation_and_updates(
    root: Path,
    start_kubelet: Callable[..., SimKubelet],
    start_plugin: Callable[..., RecordingPlugin],
) -> None:
    kubelet = start_kubelet()
    start_plugin(GPU, gpu_devices())
    dongles = start_plugin(DONGLE, 2)
    wait_until(lambda: kubelet.manager.allocatable() == {DONGLE: 2, GPU: 4})

    pod = kubelet.create_pod("ml", "train", [ContainerSpec("main", {GPU: 2, DONGLE: 1})])

    raw = json.loads(kubelet.paths.checkpoint.read_text())
    assert set(raw) == {"Data", "Checksum"}
    assert set(raw["Data"]) == {"PodDeviceEntries", "RegisteredDevices"}
    by_resource = {e["ResourceName"]: e for e in raw["Data"]["PodDeviceEntries"]}
    assert by_resource[GPU]["DeviceIDs"] == {"0": ["g0", "g1"]}
    assert by_resource[DONGLE]["DeviceIDs"] == {"-1": ["d0"]}

    checkpoint = read_checkpoint(kubelet.paths.checkpoint)
    entries = {(e.pod_uid, e.container_name, e.resource_name): e for e in checkpoint.entries}
    assert set(entries) == {(pod.uid, "main", GPU), (pod.uid, "main", DONGLE)}
    assert entries[(pod.uid, "main", GPU)].allocation.envs == {"TEST_DEVICES": "g0,g1"}
    assert entries[(pod.uid, "main", GPU)].allocation.devices[0].container_path == "/dev/t0"
    assert checkpoint.registered_devices == {DONGLE: ["d0", "d1"], GPU: ["g0", "g1", "g2", "g3"]}

    # RegisteredDevices is the healthy set, rewritten on every ListAndWatch update.
    dongles.set_health("d1", "Unhealthy")
    wait_until(
        lambda: read_checkpoint(kubelet.paths.checkpoint).registered_devices[DONGLE] == ["d0"],
    )
    leftovers = [p.name for p in device_plugins_dir(root).iterdir() if p.name.startswith(".")]
    assert leftovers == []


def leave_stale_socket(path: Path) -> None:
    """Bind a socket and close it without unlinking, as a crashed process leaves it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(str(path))


def test_restart_cleans_sockets_plugins_reregister_and_pods_keep_devices(
    root: Path,
    start_kubelet: Callable[..., SimKubelet],
    start_plugin: Callable[..., RecordingPlugin],
) -> None:
    first = start_kubelet()
    gpus = start_plugin(GPU, gpu_devices())
    dongles = start_plugin(DONGLE, 2)
    wait_until(lambda: first.manager.allocatable() == {DONGLE: 2, GPU: 4})
    pod = first.create_pod("ml", "train", [ContainerSpec("main", {GPU: 2, DONGLE: 1})])
    first.create_pod("ml", "idle", [ContainerSpec("app")])
    before = list_pods(root)
    plugin_dir = device_plugins_dir(root)
    leave_stale_socket(plugin_dir / "crashed.sock")
    (plugin_dir / "notes.txt").write_text("not a socket\n")

    first.stop()
    second = start_kubelet()

    assert not (plugin_dir / "crashed.sock").exists()
    assert (plugin_dir / "notes.txt").exists()
    assert gpus.wait_for_registration(2, timeout=10)
    assert dongles.wait_for_registration(2, timeout=10)
    wait_until(lambda: second.manager.allocatable() == {DONGLE: 2, GPU: 4})

    restored = second.pods.find("ml", "train")
    assert restored is not None and restored.uid == pod.uid
    after = list_pods(root)
    assert [(p.namespace, p.name) for p in after.pod_resources] == [
        (p.namespace, p.name) for p in before.pod_resources
    ]
    assert device_entries(after.pod_resources[1].containers[0].devices) == {
        (GPU, "g0", 0),
        (GPU, "g1", 0),
        (DONGLE, "d0", None),
    }
    # Devices held across the restart are not handed out again.
    second.create_pod("ml", "next", [ContainerSpec("main", {GPU: 2, DONGLE: 1})])
    again = second.pods.find("ml", "next")
    assert again is not None
    held = second.manager.assignments(again.uid)["main"]
    assert held[GPU].device_ids == {"g2", "g3"}
    assert held[DONGLE].device_ids == {"d1"}


def test_restart_without_plugins_keeps_pods_and_reports_zero_capacity(
    root: Path,
    start_kubelet: Callable[..., SimKubelet],
    start_plugin: Callable[..., RecordingPlugin],
) -> None:
    first = start_kubelet()
    plugin = start_plugin(DONGLE, 2)
    wait_until(lambda: first.manager.allocatable() == {DONGLE: 2})
    first.create_pod("default", "holder", [ContainerSpec("main", {DONGLE: 1})])
    first.stop()
    plugin.stop(grace=0)
    # The kubelet went down first, so its checkpoint still lists both devices as healthy.
    assert read_checkpoint(first.paths.checkpoint).registered_devices == {DONGLE: ["d0", "d1"]}

    second = start_kubelet(grace_seconds=300)

    # Restored resources have no endpoint until their plugin registers again.
    assert second.manager.capacity() == {DONGLE: 0}
    (holder,) = list_pods(root).pod_resources
    assert holder.name == "holder"
    assert device_entries(holder.containers[0].devices) == {(DONGLE, "d0", None)}
    with pytest.raises(AdmissionError, match="not connected"):
        second.create_pod("default", "more", [ContainerSpec("main", {DONGLE: 1})])


def test_unreadable_checkpoint_does_not_stop_the_kubelet(
    root: Path, start_kubelet: Callable[..., SimKubelet]
) -> None:
    device_plugins_dir(root).mkdir(parents=True)
    (device_plugins_dir(root) / "kubelet_internal_checkpoint").write_text("{not json")

    kubelet = start_kubelet()

    assert kubelet.manager.capacity() == {}
