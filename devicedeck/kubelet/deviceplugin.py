"""A device plugin server base: serve DevicePlugin v1beta1 on a unix socket, register with
the kubelet, and keep doing both across kubelet restarts.

Subclass DevicePluginServer and override allocate_container (and, if needed,
pre_start_container or preferred_devices); feed device changes with set_devices,
set_health, add_device and remove_device.

Every ListAndWatch stream receives the full device list on each change (see
deviceplugin_service.StreamHub).
"""

from __future__ import annotations

import logging
import stat
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType

import grpc

from devicedeck.kubelet.deviceplugin_service import AllocationError, DevicePluginServicer, StreamHub
from devicedeck.kubelet.names import device_id_problem, extended_resource_name_problem
from devicedeck.kubelet.paths import (
    KUBELET_SOCKET_NAME,
    check_socket_path,
    default_plugin_socket_name,
    unix_target,
)
from devicedeck.kubelet.preferred_allocation import choose_preferred_devices
from devicedeck.kubelet.proto import deviceplugin_pb2, deviceplugin_pb2_grpc
from devicedeck.kubelet.socket_watch import DirectoryWatcher, SocketId, socket_id

__all__ = [
    "API_VERSION",
    "HEALTHY",
    "UNHEALTHY",
    "AllocationError",
    "DevicePluginServer",
    "PluginDevice",
]

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
REGISTER_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class PluginDevice:
    id: str
    health: str = HEALTHY
    numa_nodes: tuple[int, ...] = ()

    def to_proto(self) -> deviceplugin_pb2.Device:
        device = deviceplugin_pb2.Device(ID=self.id, health=self.health)
        if self.numa_nodes:
            device.topology.nodes.extend(deviceplugin_pb2.NUMANode(ID=n) for n in self.numa_nodes)
        return device


class DevicePluginServer:
    def __init__(
        self,
        resource_name: str,
        *,
        device_plugins_dir: Path | str,
        devices: Iterable[PluginDevice] = (),
        socket_name: str | None = None,
        pre_start_required: bool = False,
        preferred_allocation_available: bool = True,
        register_timeout: float = REGISTER_TIMEOUT_SECONDS,
        max_workers: int = 16,
    ) -> None:
        problem = extended_resource_name_problem(resource_name)
        if problem:
            raise ValueError(f"resource name {resource_name!r} {problem}")
        self.resource_name = resource_name
        self.device_plugins_dir = Path(device_plugins_dir)
        self.socket_name = socket_name or default_plugin_socket_name(resource_name)
        self.socket_path = self.device_plugins_dir / self.socket_name
        self.kubelet_socket_path = self.device_plugins_dir / KUBELET_SOCKET_NAME
        check_socket_path(self.socket_path)
        self.options = deviceplugin_pb2.DevicePluginOptions(
            pre_start_required=pre_start_required,
            get_preferred_allocation_available=preferred_allocation_available,
        )
        self.register_timeout = register_timeout
        self._max_workers = max_workers

        # One lock guards devices and the registration state; the condition lets
        # callers wait for a registration instead of sleeping.
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._devices: dict[str, PluginDevice] = {}
        self._registrations = 0
        self._stopping = False
        self._register_channels: set[grpc.Channel] = set()
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._socket_inode: int | None = None
        # The kubelet.sock the last registration went to (see register()).
        self._registered_with: SocketId | None = None
        self._registering = threading.Lock()
        self._watcher: DirectoryWatcher | None = None
        self._set_devices_locked(devices)
        self.streams = StreamHub(self._snapshot_locked())

    # ---- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        """Serve the plugin socket and register if the kubelet is up. Later kubelet
        restarts and deletions of our socket are handled by a watcher thread."""
        self.device_plugins_dir.mkdir(parents=True, exist_ok=True)
        # Watch before serving and checking for kubelet.sock, so no change is missed.
        self._watcher = DirectoryWatcher(
            self.device_plugins_dir, self._on_dir_change, name=f"watch-{self.socket_name}"
        )
        self._watcher.start()
        try:
            self._serve()
        except BaseException:
            self.stop()
            raise
        if self.kubelet_socket_path.exists():
            self.register()
        else:
            log.info(
                "waiting for kubelet",
                extra={"event": "waiting_for_kubelet", "socket": self.kubelet_socket_path},
            )

    def stop(self, grace: float = 1.0) -> None:
        """End every stream, stop serving, remove our socket and stop the watcher."""
        with self._lock:
            self._stopping = True
            # Cancels registrations blocked on an unresponsive kubelet socket.
            for channel in self._register_channels:
                channel.close()
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        self.streams.close()
        self._stop_server(grace)
        log.info(
            "plugin stopped", extra={"event": "plugin_stopped", "resource": self.resource_name}
        )

    def __enter__(self) -> DevicePluginServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _serve(self) -> None:
        if self.socket_path.exists() or self.socket_path.is_symlink():
            if not stat.S_ISSOCK(self.socket_path.lstat().st_mode):
                raise RuntimeError(f"{self.socket_path} exists and is not a socket")
            self.socket_path.unlink()
        executor = ThreadPoolExecutor(
            max_workers=self._max_workers, thread_name_prefix=f"plugin-{self.socket_name}"
        )
        server = grpc.server(executor)
        deviceplugin_pb2_grpc.add_DevicePluginServicer_to_server(DevicePluginServicer(self), server)
        try:
            server.add_insecure_port(unix_target(self.socket_path))
        except RuntimeError as e:
            executor.shutdown(wait=False)
            raise RuntimeError(f"cannot bind {self.socket_path}") from e
        server.start()
        self._server, self._executor = server, executor
        self._socket_inode = self.socket_path.stat().st_ino
        log.info(
            "serving",
            extra={"event": "serving", "resource": self.resource_name, "socket": self.socket_path},
        )

    def _stop_server(self, grace: float) -> None:
        self.streams.end_streams()
        with self._lock:
            server, executor = self._server, self._executor
            self._server = self._executor = None
        if server is not None:
            server.stop(grace).wait()
        if executor is not None:
            executor.shutdown(wait=True)
        if self._own_socket_present():
            self.socket_path.unlink()
        self._socket_inode = None

    def _own_socket_present(self) -> bool:
        try:
            st = self.socket_path.lstat()
        except FileNotFoundError:
            return False
        return stat.S_ISSOCK(st.st_mode) and st.st_ino == self._socket_inode

    def _on_dir_change(self, created: set[str], removed: set[str]) -> None:
        if self._stopping:
            return
        # Our own unlink-before-bind also shows up as a removal; only a socket that is
        # really gone (a new kubelet cleaned the directory) means serving again, and the
        # kubelet must be told of the new socket.
        if self.socket_name in removed and not self._own_socket_present():
            log.info(
                "socket removed",
                extra={"event": "socket_removed", "socket": self.socket_path, "action": "reserve"},
            )
            self._stop_server(grace=0)
            self._serve()
            if self.kubelet_socket_path.exists():
                self.register()
        elif KUBELET_SOCKET_NAME in created and self.kubelet_socket_path.exists():
            log.info(
                "kubelet socket created",
                extra={"event": "kubelet_socket_created", "socket": self.kubelet_socket_path},
            )
            # The report of a kubelet.sock comes late when the plugin registered with it in
            # between (re-serving its own socket, or starting).
            self.register(unless_registered=True)

    def register(self, *, unless_registered: bool = False) -> bool:
        """Call Registration.Register on kubelet.sock; True when the kubelet accepted.

        With `unless_registered`, a kubelet.sock this plugin last registered with is left
        alone: each registration makes the kubelet replace the plugin's endpoint, failing an
        Allocate in flight on the one it replaces. Registrations run one at a time, so such a
        call waits for one in flight and then sees it."""
        with self._registering:
            kubelet = socket_id(self.kubelet_socket_path)
            if unless_registered and kubelet is not None and kubelet == self._registered_with:
                return True
            return self._register_with(kubelet)

    def _register_with(self, kubelet: SocketId | None) -> bool:
        request = deviceplugin_pb2.RegisterRequest(
            version=API_VERSION,
            endpoint=self.socket_name,
            resource_name=self.resource_name,
            options=self.options,
        )
        channel = grpc.insecure_channel(unix_target(self.kubelet_socket_path))
        with self._lock:
            if self._stopping:
                channel.close()
                return False
            self._register_channels.add(channel)
        try:
            stub = deviceplugin_pb2_grpc.RegistrationStub(channel)
            # wait_for_ready rides out the moment between the kubelet binding its socket
            # and serving on it.
            stub.Register(request, timeout=self.register_timeout, wait_for_ready=True)
        except grpc.RpcError as e:
            code = e.code() if isinstance(e, grpc.Call) else None
            log.warning(
                "register failed",
                extra={
                    "event": "register_failed",
                    "resource": self.resource_name,
                    "kubelet_socket": self.kubelet_socket_path,
                    "code": code,
                },
            )
            return False
        finally:
            with self._lock:
                self._register_channels.discard(channel)
            channel.close()
        with self._changed:
            self._registrations += 1
            self._registered_with = kubelet
            self._changed.notify_all()
        log.info(
            "registered",
            extra={
                "event": "registered",
                "resource": self.resource_name,
                "endpoint": self.socket_name,
                "count": self._registrations,
            },
        )
        return True

    # ---- state for callers and tests ----------------------------------------------------

    @property
    def registration_count(self) -> int:
        with self._lock:
            return self._registrations

    @property
    def stream_count(self) -> int:
        return self.streams.count

    def wait_for_registration(self, count: int = 1, timeout: float = 10.0) -> bool:
        """Wait until the kubelet accepted at least `count` registrations in total."""
        with self._changed:
            return self._changed.wait_for(lambda: self._registrations >= count, timeout)

    def wait_for_streams(self, count: int, timeout: float = 10.0) -> bool:
        """Wait until exactly `count` ListAndWatch streams are open."""
        return self.streams.wait_for_count(count, timeout)

    # ---- devices -------------------------------------------------------------------------

    def devices(self) -> list[PluginDevice]:
        with self._lock:
            return list(self._devices.values())

    def device(self, device_id: str) -> PluginDevice | None:
        with self._lock:
            return self._devices.get(device_id)

    def set_devices(self, devices: Iterable[PluginDevice]) -> None:
        """Replace the whole device list and tell every stream."""
        with self._lock:
            self._set_devices_locked(devices)
            self._publish_locked()

    def set_health(self, device_id: str, health: str) -> None:
        with self._lock:
            current = self._known_locked(device_id)
            if current.health == health:
                return
            self._devices[device_id] = replace(current, health=health)
            log.info(
                "health changed",
                extra={"event": "health_changed", "device": device_id, "health": health},
            )
            self._publish_locked()

    def add_device(self, device: PluginDevice) -> None:
        with self._lock:
            if device.id in self._devices:
                raise ValueError(f"device {device.id!r} already exists")
            self._check_device(device)
            self._devices[device.id] = device
            log.info("device added", extra={"event": "device_added", "device": device.id})
            self._publish_locked()

    def remove_device(self, device_id: str) -> PluginDevice:
        with self._lock:
            device = self._known_locked(device_id)
            del self._devices[device_id]
            log.info("device removed", extra={"event": "device_removed", "device": device_id})
            self._publish_locked()
            return device

    def _known_locked(self, device_id: str) -> PluginDevice:
        try:
            return self._devices[device_id]
        except KeyError:
            raise KeyError(f"unknown device {device_id!r}") from None

    @staticmethod
    def _check_device(device: PluginDevice) -> None:
        problem = device_id_problem(device.id)
        if problem:
            raise ValueError(f"device id {device.id!r} {problem}")

    def _set_devices_locked(self, devices: Iterable[PluginDevice]) -> None:
        new: dict[str, PluginDevice] = {}
        for device in devices:
            self._check_device(device)
            if device.id in new:
                raise ValueError(f"device {device.id!r} listed twice")
            new[device.id] = device
        self._devices = new

    def _snapshot_locked(self) -> deviceplugin_pb2.ListAndWatchResponse:
        return deviceplugin_pb2.ListAndWatchResponse(
            devices=[d.to_proto() for d in self._devices.values()]
        )

    def _publish_locked(self) -> None:
        # Called with the device lock held, so streams see changes in order.
        self.streams.publish(self._snapshot_locked())

    # ---- hooks for subclasses --------------------------------------------------------

    def allocate_container(
        self, device_ids: list[str]
    ) -> deviceplugin_pb2.ContainerAllocateResponse:
        """The settings one container gets for these devices. The base grants nothing
        beyond the devices themselves; real plugins add env vars, device nodes, mounts."""
        return deviceplugin_pb2.ContainerAllocateResponse()

    def pre_start_container(self, device_ids: list[str]) -> None:
        """Called before a container starts when pre_start_required is set."""

    def preferred_devices(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        with self._lock:
            numa = {d.id: d.numa_nodes for d in self._devices.values()}
        return choose_preferred_devices(available, must_include, size, numa)

    def unknown_devices(self, device_ids: Sequence[str]) -> list[str]:
        with self._lock:
            return [d for d in device_ids if d not in self._devices]
