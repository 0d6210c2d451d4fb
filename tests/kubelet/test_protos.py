"""The generated stubs: up to date, and wire-compatible names, paths and field numbers."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import FileDescriptor

from devicedeck.kubelet import generate
from devicedeck.kubelet.paths import KubeletPaths, unix_target
from devicedeck.kubelet.proto import (
    deviceplugin_pb2,
    deviceplugin_pb2_grpc,
    drahealth_pb2,
    drahealth_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
    podresources_pb2,
    podresources_pb2_grpc,
)

EXPECTED_METHODS = {
    "/v1beta1.Registration/Register",
    "/v1beta1.DevicePlugin/GetDevicePluginOptions",
    "/v1beta1.DevicePlugin/ListAndWatch",
    "/v1beta1.DevicePlugin/GetPreferredAllocation",
    "/v1beta1.DevicePlugin/Allocate",
    "/v1beta1.DevicePlugin/PreStartContainer",
    "/v1.PodResourcesLister/List",
    "/v1.PodResourcesLister/GetAllocatableResources",
    "/v1.PodResourcesLister/Get",
    "/pluginregistration.Registration/GetInfo",
    "/pluginregistration.Registration/NotifyRegistrationStatus",
    "/v1alpha1.DRAResourceHealth/NodeWatchResources",
}


def test_generated_stubs_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "devicedeck.kubelet.generate", "--check"],
        cwd=generate.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_check_reports_a_stale_file(tmp_path: Path) -> None:
    # A copy of the protos with one generated module missing must be reported.
    proto_dir = tmp_path / generate.PROTO_PACKAGE_DIR
    proto_dir.mkdir(parents=True)
    for name in generate.PROTO_NAMES:
        source = generate.REPO_ROOT / generate.PROTO_PACKAGE_DIR / f"{name}.proto"
        (proto_dir / f"{name}.proto").write_text(source.read_text())
    generate.run_protoc(tmp_path, tmp_path)
    assert generate.stale_files(tmp_path) == []
    (proto_dir / "podresources_pb2.pyi").unlink()
    (proto_dir / "deviceplugin_pb2.py").write_text("# edited\n")
    assert generate.stale_files(tmp_path) == [
        "devicedeck/kubelet/proto/deviceplugin_pb2.py",
        "devicedeck/kubelet/proto/podresources_pb2.pyi",
    ]


def method_paths(file: FileDescriptor) -> set[str]:
    return {
        f"/{service.full_name}/{method.name}"
        for service in file.services_by_name.values()
        for method in service.methods
    }


def test_descriptor_method_paths() -> None:
    paths = (
        method_paths(deviceplugin_pb2.DESCRIPTOR)
        | method_paths(podresources_pb2.DESCRIPTOR)
        | method_paths(pluginregistration_pb2.DESCRIPTOR)
        | method_paths(drahealth_pb2.DESCRIPTOR)
    )
    assert paths == EXPECTED_METHODS
    assert deviceplugin_pb2.DESCRIPTOR.package == "v1beta1"
    assert podresources_pb2.DESCRIPTOR.package == "v1"
    assert pluginregistration_pb2.DESCRIPTOR.package == "pluginregistration"
    list_and_watch = deviceplugin_pb2.DESCRIPTOR.services_by_name["DevicePlugin"].methods_by_name[
        "ListAndWatch"
    ]
    assert list_and_watch.server_streaming and not list_and_watch.client_streaming
    assert drahealth_pb2.DESCRIPTOR.package == "v1alpha1"
    watch = drahealth_pb2.DESCRIPTOR.services_by_name["DRAResourceHealth"].methods_by_name[
        "NodeWatchResources"
    ]
    assert watch.server_streaming and not watch.client_streaming
    assert dict(drahealth_pb2.HealthStatus.items()) == {"UNKNOWN": 0, "HEALTHY": 1, "UNHEALTHY": 2}


def field_numbers(message: Any) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            deviceplugin_pb2.RegisterRequest,
            {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4},
        ),
        (deviceplugin_pb2.Device, {"ID": 1, "health": 2, "topology": 3}),
        (deviceplugin_pb2.NUMANode, {"ID": 1}),
        (
            deviceplugin_pb2.ContainerPreferredAllocationRequest,
            {"available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3},
        ),
        (deviceplugin_pb2.ContainerPreferredAllocationResponse, {"deviceIDs": 1}),
        (deviceplugin_pb2.ContainerAllocateRequest, {"devices_ids": 1}),
        (deviceplugin_pb2.PreStartContainerRequest, {"devices_ids": 1}),
        (
            deviceplugin_pb2.ContainerAllocateResponse,
            {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5},
        ),
        (deviceplugin_pb2.Mount, {"container_path": 1, "host_path": 2, "read_only": 3}),
        (deviceplugin_pb2.DeviceSpec, {"container_path": 1, "host_path": 2, "permissions": 3}),
        (deviceplugin_pb2.CDIDevice, {"name": 1}),
        (
            podresources_pb2.PodResources,
            {"name": 1, "namespace": 2, "containers": 3, "cpu_ids": 4, "memory": 5},
        ),
        (
            podresources_pb2.ContainerResources,
            {"name": 1, "devices": 2, "cpu_ids": 3, "memory": 4, "dynamic_resources": 5},
        ),
        (podresources_pb2.ContainerDevices, {"resource_name": 1, "device_ids": 2, "topology": 3}),
        (podresources_pb2.ContainerMemory, {"memory_type": 1, "size": 2, "topology": 3}),
        (
            podresources_pb2.DynamicResource,
            {"claim_name": 2, "claim_namespace": 3, "claim_resources": 4},
        ),
        (
            podresources_pb2.ClaimResource,
            {"cdi_devices": 1, "driver_name": 2, "pool_name": 3, "device_name": 4, "share_id": 5},
        ),
        (
            podresources_pb2.AllocatableResourcesResponse,
            {"devices": 1, "cpu_ids": 2, "memory": 3},
        ),
        (podresources_pb2.GetPodResourcesRequest, {"pod_name": 1, "pod_namespace": 2}),
        (podresources_pb2.GetPodResourcesResponse, {"pod_resources": 1}),
        (
            pluginregistration_pb2.PluginInfo,
            {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4},
        ),
        (pluginregistration_pb2.RegistrationStatus, {"plugin_registered": 1, "error": 2}),
        (drahealth_pb2.DeviceIdentifier, {"pool_name": 1, "device_name": 2}),
        (
            drahealth_pb2.DeviceHealth,
            {
                "device": 1,
                "health": 2,
                "last_updated_time": 3,
                "health_check_timeout_seconds": 4,
                "message": 5,
            },
        ),
        (drahealth_pb2.NodeWatchResourcesResponse, {"devices": 1}),
    ],
)
def test_field_numbers(message: Any, expected: dict[str, int]) -> None:
    assert field_numbers(message) == expected


def test_tombstoned_and_optional_fields() -> None:
    # DynamicResource field 1 (class_name) is reserved; share_id tracks presence.
    wire = podresources_pb2.DynamicResource(claim_name="c").SerializeToString()
    assert wire == b"\x12\x01c"
    claim = podresources_pb2.ClaimResource()
    assert not claim.HasField("share_id")
    claim.share_id = ""
    assert claim.HasField("share_id")


class PathRecorder(grpc.GenericRpcHandler):
    """Answers any method with an empty message and records the path it was called on."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self._lock = threading.Lock()

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method: str = handler_call_details.method
        with self._lock:
            self.paths.append(method)
        if method.endswith(("/ListAndWatch", "/NodeWatchResources")):
            return grpc.unary_stream_rpc_method_handler(lambda request, context: iter([b""]))
        return grpc.unary_unary_rpc_method_handler(lambda request, context: b"")


@pytest.fixture
def recorder(kubelet_root: KubeletPaths) -> Iterator[tuple[PathRecorder, grpc.Channel]]:
    handler = PathRecorder()
    socket = kubelet_root.device_plugins_dir / "recorder.sock"
    with ThreadPoolExecutor(max_workers=2) as executor:
        server = grpc.server(executor, handlers=[handler])
        server.add_insecure_port(unix_target(socket))
        server.start()
        try:
            with grpc.insecure_channel(unix_target(socket)) as channel:
                yield handler, channel
        finally:
            server.stop(0).wait()


def test_real_calls_use_the_kubelet_paths(recorder: tuple[PathRecorder, grpc.Channel]) -> None:
    handler, channel = recorder
    plugin = deviceplugin_pb2_grpc.DevicePluginStub(channel)
    lister = podresources_pb2_grpc.PodResourcesListerStub(channel)
    registry = pluginregistration_pb2_grpc.RegistrationStub(channel)
    calls: list[Callable[[], object]] = [
        lambda: deviceplugin_pb2_grpc.RegistrationStub(channel).Register(
            deviceplugin_pb2.RegisterRequest(), timeout=5
        ),
        lambda: plugin.GetDevicePluginOptions(deviceplugin_pb2.Empty(), timeout=5),
        lambda: list(plugin.ListAndWatch(deviceplugin_pb2.Empty(), timeout=5)),
        lambda: plugin.GetPreferredAllocation(
            deviceplugin_pb2.PreferredAllocationRequest(), timeout=5
        ),
        lambda: plugin.Allocate(deviceplugin_pb2.AllocateRequest(), timeout=5),
        lambda: plugin.PreStartContainer(deviceplugin_pb2.PreStartContainerRequest(), timeout=5),
        lambda: lister.List(podresources_pb2.ListPodResourcesRequest(), timeout=5),
        lambda: lister.GetAllocatableResources(
            podresources_pb2.AllocatableResourcesRequest(), timeout=5
        ),
        lambda: lister.Get(podresources_pb2.GetPodResourcesRequest(), timeout=5),
        lambda: registry.GetInfo(pluginregistration_pb2.InfoRequest(), timeout=5),
        lambda: registry.NotifyRegistrationStatus(
            pluginregistration_pb2.RegistrationStatus(), timeout=5
        ),
        lambda: list(
            drahealth_pb2_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
                drahealth_pb2.NodeWatchResourcesRequest(), timeout=5
            )
        ),
    ]
    for call in calls:
        call()
    assert set(handler.paths) == EXPECTED_METHODS
    assert len(handler.paths) == len(EXPECTED_METHODS)
