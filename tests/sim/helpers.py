"""Helpers for the simulated kubelet tests: waiting, a recording plugin, gRPC shortcuts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from devicedeck.kubelet.deviceplugin import DevicePluginServer, PluginDevice
from devicedeck.kubelet.paths import pod_resources_socket, unix_target
from devicedeck.kubelet.proto import deviceplugin_pb2 as dp
from devicedeck.kubelet.proto import pluginregistration_pb2 as preg
from devicedeck.kubelet.proto import pluginregistration_pb2_grpc as preg_grpc
from devicedeck.kubelet.proto import podresources_pb2 as pr
from devicedeck.kubelet.proto import podresources_pb2_grpc as pr_grpc


def wait_until(
    predicate: Callable[[], object], timeout: float = 60.0, message: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(0.02)


def make_devices(spec: int | Iterable[PluginDevice]) -> list[PluginDevice]:
    """An int n gives d0..d(n-1) without topology; PluginDevices pass through."""
    if isinstance(spec, int):
        return [PluginDevice(f"d{i}") for i in range(spec)]
    return list(spec)


class RecordingPlugin(DevicePluginServer):
    """A plugin that records what the kubelet asked and can be told what to prefer."""

    def __init__(self, *args: Any, prefer: Sequence[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prefer = list(prefer) if prefer is not None else None
        self.allocate_calls: list[list[str]] = []
        self.pre_start_calls: list[list[str]] = []
        self.preferred_calls: list[tuple[list[str], list[str], int]] = []

    def allocate_container(self, device_ids: list[str]) -> dp.ContainerAllocateResponse:
        self.allocate_calls.append(list(device_ids))
        return dp.ContainerAllocateResponse(
            envs={"TEST_DEVICES": ",".join(device_ids)},
            devices=[
                dp.DeviceSpec(container_path="/dev/t0", host_path="/dev/t0", permissions="rw")
            ],
        )

    def pre_start_container(self, device_ids: list[str]) -> None:
        self.pre_start_calls.append(list(device_ids))

    def preferred_devices(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        self.preferred_calls.append((list(available), list(must_include), size))
        if self.prefer is not None:
            return [d for d in self.prefer if d in available][:size]
        return super().preferred_devices(available, must_include, size)


def pod_resources_stub(root: Path) -> tuple[grpc.Channel, pr_grpc.PodResourcesListerStub]:
    channel = grpc.insecure_channel(unix_target(pod_resources_socket(root)))
    return channel, pr_grpc.PodResourcesListerStub(channel)


# The socket's file appears when it is bound, a moment before the server listens on it: a
# call right then would be refused, so the calls wait (up to their timeout) for the server.
def list_pods(root: Path) -> pr.ListPodResourcesResponse:
    channel, stub = pod_resources_stub(root)
    with channel:
        return stub.List(pr.ListPodResourcesRequest(), timeout=5, wait_for_ready=True)


def allocatable(root: Path) -> pr.AllocatableResourcesResponse:
    channel, stub = pod_resources_stub(root)
    with channel:
        return stub.GetAllocatableResources(
            pr.AllocatableResourcesRequest(), timeout=5, wait_for_ready=True
        )


def device_entries(devices: Iterable[pr.ContainerDevices]) -> set[tuple[str, str, int | None]]:
    """(resource, device id, NUMA node or None) per entry; each entry must hold one id."""
    entries = set()
    for entry in devices:
        assert len(entry.device_ids) == 1, f"entry with {len(entry.device_ids)} ids: {entry}"
        if entry.HasField("topology"):
            assert len(entry.topology.nodes) == 1
            numa: int | None = entry.topology.nodes[0].ID
        else:
            numa = None
        entries.add((entry.resource_name, entry.device_ids[0], numa))
    return entries


class WatcherRegistration(preg_grpc.RegistrationServicer):
    """The plugin side of the plugin-watcher API on a socket in plugins_registry/."""

    def __init__(self, info: preg.PluginInfo) -> None:
        self.info = info
        self.statuses: list[preg.RegistrationStatus] = []
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self.socket_path: Path | None = None

    def GetInfo(self, request: preg.InfoRequest, context: grpc.ServicerContext) -> preg.PluginInfo:
        return self.info

    def NotifyRegistrationStatus(
        self, request: preg.RegistrationStatus, context: grpc.ServicerContext
    ) -> preg.RegistrationStatusResponse:
        with self._lock:
            self.statuses.append(request)
        return preg.RegistrationStatusResponse()

    def status_list(self) -> list[preg.RegistrationStatus]:
        with self._lock:
            return list(self.statuses)

    def start(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self._executor = ThreadPoolExecutor(max_workers=2)
        self._server = grpc.server(self._executor)
        preg_grpc.add_RegistrationServicer_to_server(self, self._server)
        self._server.add_insecure_port(unix_target(socket_path))
        self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0).wait()
            self._server = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self.socket_path is not None:
            self.socket_path.unlink(missing_ok=True)
