"""The agent's kubelet-side sources in process, over real unix sockets: the PodResources
reader backing off a rate-limited kubelet, and taps finding the right plugin socket."""

from __future__ import annotations

import itertools
import random
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from devicedeck.agent.kubelet_reader import KubeletReader, KubeletView
from devicedeck.agent.metrics import AgentMetrics
from devicedeck.agent.plugin_sockets import TapSpec, candidates, registry_endpoint
from devicedeck.agent.taps import ResourceTap
from devicedeck.kubelet.deviceplugin import DevicePluginServer, PluginDevice
from devicedeck.kubelet.paths import KubeletPaths, default_plugin_socket_name, unix_target
from devicedeck.kubelet.proto import pluginregistration_pb2 as preg
from devicedeck.kubelet.proto import pluginregistration_pb2_grpc as preg_grpc
from devicedeck.retry import NO_JITTER, Backoff

from .fakes import RateLimitedPodResources
from .helpers import wait_until


class CeilingRandom(random.Random):
    """Full jitter at its upper bound, so back-off delays are predictable in a test."""

    def uniform(self, a: float, b: float) -> float:
        return b


@pytest.fixture
def paths(work_dir: Path) -> KubeletPaths:
    paths = KubeletPaths(work_dir / "kubelet")
    paths.make_dirs()
    return paths


def test_reader_backs_off_exponentially_while_rate_limited(paths: KubeletPaths) -> None:
    kubelet = RateLimitedPodResources(paths.root, exhausted_for=1.2)
    kubelet.start()
    views: list[KubeletView] = []
    reader = KubeletReader(
        paths,
        AgentMetrics(),
        interval=60,
        backoff=Backoff(0.1, 0.4, CeilingRandom()),
        on_change=views.append,
        min_call_gap=0.01,
    )
    reader.start()
    try:
        wait_until(
            lambda: views and views[-1].pods is not None and views[-1].allocatable is not None,
            message="both calls answered",
        )
    finally:
        reader.stop()
        kubelet.stop()
    refused = [c.at for c in kubelet.calls if c.refused]
    gaps = [b - a for a, b in itertools.pairwise(refused)]
    # 0.1, 0.2, 0.4, then capped at 0.4 (timer slack allowed above, never below).
    expected = [0.1, 0.2, 0.4, 0.4, 0.4][: len(gaps)]
    assert len(gaps) >= 3
    assert all(g >= e * 0.9 for g, e in zip(gaps, expected, strict=True)), gaps
    assert views[-1].pods is not None and views[-1].pods.pod_resources[0].name == "limited"
    assert not views[-1].allocatable_pending


@pytest.fixture
def plugins(paths: KubeletPaths) -> Iterator[dict[str, DevicePluginServer]]:
    started = {
        "example.com/x": DevicePluginServer(
            "example.com/x",
            device_plugins_dir=paths.device_plugins_dir,
            devices=[PluginDevice("x0", numa_nodes=(0,)), PluginDevice("x1")],
            socket_name="vendor-x.sock",  # not the usual name: found by probing
        ),
        "example.com/y": DevicePluginServer(
            "example.com/y",
            device_plugins_dir=paths.device_plugins_dir,
            devices=[PluginDevice("y0")],
        ),
    }
    for plugin in started.values():
        plugin.start()
    yield started
    for plugin in started.values():
        plugin.stop(grace=0)


def test_probing_finds_the_plugin_by_its_devices_and_leaves_others_alone(
    paths: KubeletPaths, plugins: dict[str, DevicePluginServer]
) -> None:
    spec = TapSpec.parse("example.com/x")
    found = list(
        candidates(
            paths,
            spec,
            known_devices={"x0"},
            skip=lambda p: False,
            other_resources={"example.com/y"},
        )
    )
    # y's socket carries y's usual name: it is never probed for x.
    assert [(c.path.name, c.method) for c in found] == [("vendor-x.sock", "probe")]
    # Without devices from the kubelet there is nothing to match: no probing at all.
    assert list(candidates(paths, spec, known_devices=set(), skip=lambda p: False)) == []

    messages: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = []
    lock = threading.Lock()

    def record(resource: str, devices: list[dict[str, Any]], plugin: dict[str, Any]) -> None:
        with lock:
            messages.append((resource, devices, plugin))

    tap = ResourceTap(
        paths,
        spec,
        AgentMetrics(),
        backoff=Backoff(0.05, 0.2),
        known_devices=lambda resource: {"x0", "x1"},
        known_resources=lambda: {"example.com/x"},
        claimed_elsewhere=lambda tap, path: False,
        on_message=record,
        on_disconnect=lambda resource: None,
    )
    tap.start()
    try:
        wait_until(lambda: messages, message="the first message")
        plugins["example.com/x"].set_health("x1", "Unhealthy")
        wait_until(lambda: len(messages) >= 2, message="the health change")
    finally:
        tap.stop()
    resource, devices, plugin = messages[-1]
    assert resource == "example.com/x" and plugin["endpoint"] == "vendor-x.sock"
    assert devices == [
        {"ID": "x0", "health": "Healthy", "topology": {"nodes": [{"ID": 0}]}},
        {"ID": "x1", "health": "Unhealthy"},
    ]
    # The y plugin was probed (its name is unknown to this tap) but let go at once.
    assert plugins["example.com/y"].wait_for_streams(0, timeout=60)
    assert tap.socket is None


def test_a_tap_woken_by_a_new_socket_retries_soon_when_the_plugin_is_not_listening_yet(
    paths: KubeletPaths,
) -> None:
    resource = "example.com/x"
    socket_path = paths.device_plugins_dir / default_plugin_socket_name(resource)
    metrics = AgentMetrics()
    messages: list[list[dict[str, Any]]] = []
    # The back-off a long plugin outage builds up: ten minutes, exactly.
    backoff = Backoff(0.05, 600, jitter=NO_JITTER)
    backoff.failures = 20
    tap = ResourceTap(
        paths,
        TapSpec(resource),
        metrics,
        backoff=backoff,
        known_devices=lambda resource: set(),
        known_resources=lambda: {resource},
        claimed_elsewhere=lambda tap, path: False,
        on_message=lambda resource, devices, plugin: messages.append(devices),
        on_disconnect=lambda resource: None,
    )

    def refused() -> float:
        labels = {"call": "ListAndWatch", "code": "UNAVAILABLE"}
        return (
            metrics.registry.get_sample_value("devicedeck_agent_kubelet_call_errors_total", labels)
            or 0.0
        )

    plugin = DevicePluginServer(
        resource, device_plugins_dir=paths.device_plugins_dir, devices=[PluginDevice("x0")]
    )
    tap.start()
    try:
        # No socket yet: the tap found nothing and waits out its back-off.
        wait_until(lambda: backoff.failures > 20, message="the tap's first try")
        # A plugin between bind() and listen(): its socket is there and refuses connections.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as early:
            early.bind(str(socket_path))
            tap.sockets_changed()
            wait_until(refused, message="the tap refused by the socket it was woken for")
        # The plugin serves on that path now, and no other socket event comes.
        plugin.start()
        wait_until(lambda: messages, message="the tap streaming from the plugin")
    finally:
        tap.stop()
        plugin.stop(grace=0)
    assert messages[0] == [{"ID": "x0", "health": "Healthy"}]


class Registration(preg_grpc.RegistrationServicer):
    def __init__(self, info: preg.PluginInfo) -> None:
        self.info = info

    def GetInfo(self, request: preg.InfoRequest, context: grpc.ServicerContext) -> preg.PluginInfo:
        return self.info


def test_plugin_watcher_registrations_name_the_endpoint(paths: KubeletPaths) -> None:
    executor = ThreadPoolExecutor(max_workers=2)
    server = grpc.server(executor)
    info = preg.PluginInfo(type="DevicePlugin", name="example.com/x", endpoint="vendor-x.sock")
    preg_grpc.add_RegistrationServicer_to_server(Registration(info), server)
    socket_path = paths.plugins_registry_dir / "x-reg.sock"
    server.add_insecure_port(unix_target(socket_path))
    server.start()
    try:
        endpoint = registry_endpoint(paths, "example.com/x")
        assert endpoint == paths.device_plugins_dir / "vendor-x.sock"
        assert registry_endpoint(paths, "example.com/other") is None
    finally:
        server.stop(0).wait()
        executor.shutdown(wait=True)
