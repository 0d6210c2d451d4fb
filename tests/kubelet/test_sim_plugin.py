"""The simulated device plugin: ids, topology, Allocate answers, health driving, the CLI."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from devicedeck.kubelet.deviceplugin import HEALTHY, UNHEALTHY
from devicedeck.kubelet.paths import KubeletPaths, unix_target
from devicedeck.kubelet.proto import deviceplugin_pb2, deviceplugin_pb2_grpc
from devicedeck.sim.node import parse_node_health_event
from devicedeck.sim.plugin import (
    HealthDriver,
    HealthEvent,
    SimDevicePlugin,
    device_id_for,
    numa_node_for,
    parse_health_event,
    parse_health_script,
)

from .fakes import FakeKubeletRegistration

REPO_ROOT = Path(__file__).resolve().parents[2]
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"


def make_plugin(
    root: KubeletPaths, profile: str, *, count: int = 4, numa_nodes: int = 1, seed: int = 0
) -> SimDevicePlugin:
    return SimDevicePlugin(
        f"example.com/{profile}",
        root=root.root,
        count=count,
        profile=profile,
        numa_nodes=numa_nodes,
        seed=seed,
    )


@pytest.fixture
def started(
    kubelet_root: KubeletPaths, request: pytest.FixtureRequest
) -> Iterator[SimDevicePlugin]:
    plugin = make_plugin(kubelet_root, request.param, numa_nodes=2, seed=7)
    plugin.start()
    try:
        yield plugin
    finally:
        plugin.stop()


def list_and_watch(channel: grpc.Channel) -> Any:
    """A ListAndWatch call: iterate it for messages, cancel() it when done."""
    return deviceplugin_pb2_grpc.DevicePluginStub(channel).ListAndWatch(
        deviceplugin_pb2.Empty(), timeout=10
    )


def test_device_ids_per_profile() -> None:
    def make_id(profile: str, index: int, seed: int = 1, node: str = "node-a") -> str:
        return device_id_for(profile, index, resource="example.com/x", seed=seed, node=node)

    assert [make_id("dongle", i) for i in range(2)] == ["dongle-0", "dongle-1"]
    gpu = make_id("gpu", 0)
    assert re.fullmatch(f"GPU-{UUID}", gpu)
    assert make_id("gpu", 0) == gpu
    assert make_id("gpu", 1) != gpu
    assert make_id("gpu", 0, seed=2) != gpu
    assert make_id("gpu", 0, node="node-b") != gpu
    assert re.fullmatch(f"MIG-{UUID}", make_id("mig", 3))
    with pytest.raises(ValueError, match="unknown profile"):
        make_id("tpu", 0)


def test_numa_layout_is_even_and_contiguous() -> None:
    assert [numa_node_for(i, 4, 2) for i in range(4)] == [(0,), (0,), (1,), (1,)]
    assert [numa_node_for(i, 6, 3) for i in range(6)] == [(0,), (0,), (1,), (1,), (2,), (2,)]
    assert numa_node_for(0, 4, 0) == ()
    assert numa_node_for(5, 4, 2) == (1,)


@pytest.mark.parametrize("started", ["dongle"], indirect=True)
def test_dongle_allocate(started: SimDevicePlugin) -> None:
    with grpc.insecure_channel(unix_target(started.socket_path)) as channel:
        request = deviceplugin_pb2.AllocateRequest()
        request.container_requests.add(devices_ids=["dongle-1", "dongle-2"])
        resp = deviceplugin_pb2_grpc.DevicePluginStub(channel).Allocate(request, timeout=5)
    container = resp.container_responses[0]
    assert dict(container.envs) == {"DONGLE_DEVICES": "dongle-1,dongle-2"}
    assert [(d.host_path, d.container_path, d.permissions) for d in container.devices] == [
        ("/dev/dongle1", "/dev/dongle1", "rw"),
        ("/dev/dongle2", "/dev/dongle2", "rw"),
    ]
    assert container.mounts[0].read_only
    assert started.socket_path.name == "example.com-dongle.sock"


@pytest.mark.parametrize("started", ["gpu", "mig"], indirect=True)
def test_gpu_like_allocate(started: SimDevicePlugin) -> None:
    ids = [d.id for d in started.devices()]
    assert [d.numa_nodes for d in started.devices()] == [(0,), (0,), (1,), (1,)]
    with grpc.insecure_channel(unix_target(started.socket_path)) as channel:
        request = deviceplugin_pb2.AllocateRequest()
        request.container_requests.add(devices_ids=ids[2:])
        resp = deviceplugin_pb2_grpc.DevicePluginStub(channel).Allocate(request, timeout=5)
    container = resp.container_responses[0]
    assert container.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(ids[2:])
    paths = [d.host_path for d in container.devices]
    assert "/dev/nvidiactl" in paths
    assert all(d.permissions == "rw" for d in container.devices)
    if started.profile == "gpu":
        assert paths[-2:] == ["/dev/nvidia2", "/dev/nvidia3"]
    else:
        assert "/dev/nvidia0" in paths and "/dev/nvidia-caps/nvidia-cap3" in paths
    assert [c.name for c in container.cdi_devices] == [
        f"{started.resource_name}={i}" for i in ids[2:]
    ]


def test_health_script_parsing() -> None:
    events = parse_health_script(
        "# comment\n\n2 dongle-1 Healthy\n0.5 #0 unplug\n1 dongle-1 Unhealthy\n3 #0 plug\n"
    )
    assert events == [
        HealthEvent(0.5, "#0", "unplug"),
        HealthEvent(1.0, "dongle-1", UNHEALTHY),
        HealthEvent(2.0, "dongle-1", HEALTHY),
        HealthEvent(3.0, "#0", "plug"),
    ]
    for bad, message in [
        ("1 dongle-1", "line 1: expected"),
        ("x dongle-1 Healthy", "not a number"),
        ("-1 dongle-1 Healthy", "must not be negative"),
        ("1 dongle-1 broken", "action 'broken'"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_health_script(bad)


def test_script_drives_health_and_hot_plug(kubelet_root: KubeletPaths) -> None:
    plugin = make_plugin(kubelet_root, "dongle", count=3)
    events = parse_health_script(
        "0 dongle-1 Unhealthy\n0 #0 unplug\n0.02 dongle-1 Healthy\n0.02 #0 plug\n0.03 dongle-7 plug"
    )
    driver = HealthDriver(plugin, events=events)
    plugin.start()
    try:
        with grpc.insecure_channel(unix_target(plugin.socket_path)) as channel:
            stream = list_and_watch(channel)
            assert len(next(stream).devices) == 3
            driver.start()
            seen = [{d.ID: d.health for d in next(stream).devices} for _ in range(5)]
            stream.cancel()
    finally:
        driver.stop()
        plugin.stop()
    assert seen == [
        {"dongle-0": HEALTHY, "dongle-1": UNHEALTHY, "dongle-2": HEALTHY},
        {"dongle-1": UNHEALTHY, "dongle-2": HEALTHY},
        {"dongle-1": HEALTHY, "dongle-2": HEALTHY},
        {"dongle-1": HEALTHY, "dongle-2": HEALTHY, "dongle-0": HEALTHY},
        {"dongle-1": HEALTHY, "dongle-2": HEALTHY, "dongle-0": HEALTHY, "dongle-7": HEALTHY},
    ]
    replugged = plugin.device("dongle-0")
    assert replugged is not None and replugged.numa_nodes == (0,)


def flap_sequence(root: KubeletPaths, seed: int) -> list[tuple[str, str]]:
    plugin = make_plugin(root, "gpu", count=4, seed=seed)
    driver = HealthDriver(plugin, flap_interval=0.005, seed=seed)
    plugin.start()
    try:
        with grpc.insecure_channel(unix_target(plugin.socket_path)) as channel:
            stream = list_and_watch(channel)
            previous = {d.ID: d.health for d in next(stream).devices}
            driver.start()
            changes = []
            for _ in range(6):
                current = {d.ID: d.health for d in next(stream).devices}
                changes += [(i, h) for i, h in current.items() if previous[i] != h]
                previous = current
            stream.cancel()
    finally:
        driver.stop()
        plugin.stop()
    return changes


def test_one_health_event_as_an_option() -> None:
    assert parse_health_event("30 dongle-4 Unhealthy") == HealthEvent(30.0, "dongle-4", UNHEALTHY)
    assert parse_node_health_event("example.com/dongle 30 #5 unplug") == (
        "example.com/dongle",
        HealthEvent(30.0, "#5", "unplug"),
    )
    for bad in ("30 dongle-4", "30 dongle-4 Unhealthy\n31 dongle-4 Healthy", ""):
        with pytest.raises(ValueError):
            parse_health_event(bad)
    with pytest.raises(ValueError, match="RESOURCE AT_SECONDS"):
        parse_node_health_event("example.com/dongle")


def test_flaps_leave_the_devices_a_script_drives_alone(kubelet_root: KubeletPaths) -> None:
    plugin = make_plugin(kubelet_root, "dongle", count=2, seed=1)
    # The script acts only much later: until then, every flap must take dongle-0.
    driver = HealthDriver(
        plugin, events=[HealthEvent(3600, "#1", UNHEALTHY)], flap_interval=0.005, seed=1
    )
    plugin.start()
    try:
        with grpc.insecure_channel(unix_target(plugin.socket_path)) as channel:
            stream = list_and_watch(channel)
            next(stream)
            driver.start()
            seen = [{d.ID: d.health for d in next(stream).devices} for _ in range(4)]
            stream.cancel()
    finally:
        driver.stop()
        plugin.stop()
    assert all(devices["dongle-1"] == HEALTHY for devices in seen)
    assert {devices["dongle-0"] for devices in seen} == {HEALTHY, UNHEALTHY}


def test_flaps_replay_for_a_seed(kubelet_root: KubeletPaths) -> None:
    first = flap_sequence(kubelet_root, seed=3)
    assert len(first) == 6
    assert flap_sequence(kubelet_root, seed=3) == first


def test_cli_registers_serves_and_stops_on_sigterm(
    kubelet_root: KubeletPaths, fake_kubelet: FakeKubeletRegistration
) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devicedeck.cli",
            "sim-plugin",
            "--root",
            str(kubelet_root.root),
            "--resource",
            "example.com/gpu",
            "--count",
            "4",
            "--profile",
            "gpu",
            "--numa",
            "2",
            "--seed",
            "5",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    try:
        assert fake_kubelet.wait_for_requests(1)
        request = fake_kubelet.requests[0]
        assert (request.version, request.endpoint, request.resource_name) == (
            "v1beta1",
            "example.com-gpu.sock",
            "example.com/gpu",
        )
        socket = kubelet_root.device_plugins_dir / request.endpoint
        with grpc.insecure_channel(unix_target(socket)) as channel:
            stream = deviceplugin_pb2_grpc.DevicePluginStub(channel).ListAndWatch(
                deviceplugin_pb2.Empty(), timeout=10
            )
            devices = next(stream).devices
            stream.cancel()
        assert len(devices) == 4
        assert all(re.fullmatch(f"GPU-{UUID}", d.ID) for d in devices)
        assert [n.ID for d in devices for n in d.topology.nodes] == [0, 0, 1, 1]
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr.decode()
    assert "event=registered" in stderr.decode()
    assert not socket.exists()


def test_cli_rejects_a_bad_resource_name(kubelet_root: KubeletPaths) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "devicedeck.cli",
            "sim-plugin",
            "--root",
            str(kubelet_root.root),
            "--resource",
            "dongle",
            "--count",
            "1",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "resource name 'dongle'" in result.stderr
