"""Classic registration on kubelet.sock and the plugin-watcher path in plugins_registry/."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from devicedeck.kubelet.paths import unix_target
from devicedeck.kubelet.proto import deviceplugin_pb2 as dp
from devicedeck.kubelet.proto import pluginregistration_pb2 as preg
from devicedeck.sim.kubelet import SimKubelet

from .helpers import RecordingPlugin, WatcherRegistration, wait_until


def register(kubelet: SimKubelet, request: dp.RegisterRequest) -> None:
    with grpc.insecure_channel(unix_target(kubelet.paths.kubelet_socket)) as channel:
        # The method path on the wire, spelled out rather than taken from the stub.
        call = channel.unary_unary(
            "/v1beta1.Registration/Register",
            request_serializer=dp.RegisterRequest.SerializeToString,
            response_deserializer=dp.Empty.FromString,
        )
        call(request, timeout=5)


def test_registered_plugin_devices_become_capacity(
    start_kubelet: Callable[..., SimKubelet], start_plugin: Callable[..., RecordingPlugin]
) -> None:
    kubelet = start_kubelet()
    plugin = start_plugin("example.com/dongle", 3)

    wait_until(lambda: kubelet.manager.allocatable() == {"example.com/dongle": 3})
    assert kubelet.manager.capacity() == {"example.com/dongle": 3}
    assert plugin.stream_count == 1


@pytest.mark.parametrize(
    ("version", "resource", "reason"),
    [
        ("v1alpha", "example.com/dongle", "unsupported device plugin API version"),
        ("v1beta1", "dongle", "invalid resource name"),
        ("v1beta1", "kubernetes.io/dongle", "invalid resource name"),
        ("v1beta1", "requests.example.com/dongle", "invalid resource name"),
    ],
)
def test_registration_refused_with_grpc_error(
    start_kubelet: Callable[..., SimKubelet], version: str, resource: str, reason: str
) -> None:
    kubelet = start_kubelet()
    request = dp.RegisterRequest(version=version, endpoint="x.sock", resource_name=resource)

    with pytest.raises(grpc.RpcError) as refused:
        register(kubelet, request)

    assert refused.value.code() == grpc.StatusCode.UNKNOWN
    assert reason in refused.value.details()
    assert kubelet.manager.capacity() == {}


def test_registration_refused_when_plugin_socket_cannot_be_dialled(
    start_kubelet: Callable[..., SimKubelet],
) -> None:
    kubelet = start_kubelet(dial_timeout=0.3)
    request = dp.RegisterRequest(
        version="v1beta1", endpoint="absent.sock", resource_name="example.com/dongle"
    )

    with pytest.raises(grpc.RpcError) as refused:
        register(kubelet, request)

    assert "cannot connect to device plugin" in refused.value.details()


def test_newer_registration_replaces_the_old_plugin(
    start_kubelet: Callable[..., SimKubelet], start_plugin: Callable[..., RecordingPlugin]
) -> None:
    kubelet = start_kubelet()
    old = start_plugin("example.com/dongle", 2, socket_name="old.sock")
    wait_until(lambda: kubelet.manager.capacity() == {"example.com/dongle": 2})

    start_plugin("example.com/dongle", 5, socket_name="new.sock")

    wait_until(lambda: kubelet.manager.capacity() == {"example.com/dongle": 5})
    wait_until(lambda: old.stream_count == 0, message="old stream closed")
    # The old plugin's stream ending must not mark the new plugin's devices unhealthy.
    assert kubelet.manager.allocatable() == {"example.com/dongle": 5}


def watcher_info(resource: str, endpoint: Path, **overrides: object) -> preg.PluginInfo:
    fields: dict[str, object] = {
        "type": "DevicePlugin",
        "name": resource,
        "endpoint": str(endpoint),
        "supported_versions": ["v1beta1"],
    }
    fields.update(overrides)
    return preg.PluginInfo(**fields)  # type: ignore[arg-type]


def test_plugin_watcher_registers_and_socket_removal_deregisters(
    root: Path,
    start_kubelet: Callable[..., SimKubelet],
    start_plugin: Callable[..., RecordingPlugin],
) -> None:
    kubelet = start_kubelet()
    # Served outside device-plugins/, so this plugin can only be found through the watcher.
    plugin = start_plugin("example.com/watched", 2, directory=root / "elsewhere")
    registration = WatcherRegistration(watcher_info("example.com/watched", plugin.socket_path))
    registration.start(kubelet.paths.plugins_registry_dir / "watched-reg.sock")
    try:
        wait_until(lambda: registration.status_list(), message="NotifyRegistrationStatus")
        status = registration.status_list()[0]
        assert status.plugin_registered and status.error == ""
        wait_until(lambda: kubelet.manager.allocatable() == {"example.com/watched": 2})
    finally:
        registration.stop()

    # Socket gone: deregistered, so the devices turn unhealthy and the stream closes.
    wait_until(lambda: kubelet.manager.allocatable() == {"example.com/watched": 0})
    assert kubelet.manager.capacity() == {"example.com/watched": 2}
    wait_until(lambda: plugin.stream_count == 0, message="stream closed")
    assert kubelet.watcher.registered_sockets() == {}


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"name": "no-domain"}, "invalid resource name"),
        ({"supported_versions": ["v1alpha"]}, "unsupported device plugin API version"),
        ({"type": "CSIPlugin"}, "not handled by this kubelet"),
    ],
)
def test_plugin_watcher_refusal_is_notified(
    root: Path,
    start_kubelet: Callable[..., SimKubelet],
    start_plugin: Callable[..., RecordingPlugin],
    overrides: dict[str, object],
    reason: str,
) -> None:
    kubelet = start_kubelet()
    plugin = start_plugin("example.com/watched", 1, directory=root / "elsewhere")
    registration = WatcherRegistration(
        watcher_info("example.com/watched", plugin.socket_path, **overrides)
    )
    registration.start(kubelet.paths.plugins_registry_dir / "refused.sock")
    try:
        wait_until(lambda: registration.status_list(), message="NotifyRegistrationStatus")
    finally:
        registration.stop()
    status = registration.status_list()[0]
    assert not status.plugin_registered
    assert reason in status.error
    assert kubelet.manager.capacity() == {}
