"""Device plugin registration, the classic way: Registration.Register on kubelet.sock.

The same checks and the same connect step serve the plugin-watcher path (watcher.py):
the version must be one the kubelet supports, the resource name an extended resource
name; then the kubelet dials the plugin, asks for its options, makes it the resource's
endpoint (replacing any older one) and opens its ListAndWatch stream. Register only
returns once that worked, so a plugin whose socket cannot be dialled gets an error.
"""

from __future__ import annotations

import logging
import stat
from collections.abc import Sequence
from pathlib import Path

import grpc

from devicedeck.kubelet.names import extended_resource_name_problem
from devicedeck.kubelet.paths import CHECKPOINT_FILE_NAME, check_socket_path
from devicedeck.kubelet.proto import deviceplugin_pb2 as dp
from devicedeck.kubelet.proto import deviceplugin_pb2_grpc as dp_grpc
from devicedeck.sim.kubelet.devices import DeviceManager
from devicedeck.sim.kubelet.endpoint import DIAL_TIMEOUT_SECONDS, EndpointError, PluginEndpoint

log = logging.getLogger(__name__)

SUPPORTED_VERSIONS = ("v1beta1",)


class RegistrationError(Exception):
    """A plugin's registration was refused; the message says why."""


def registration_problem(versions: Sequence[str], resource: str) -> str | None:
    """Why the kubelet would refuse a plugin offering these versions for this resource."""
    if not any(v in SUPPORTED_VERSIONS for v in versions):
        offered = ", ".join(repr(v) for v in versions) or "none"
        return (
            f"unsupported device plugin API version (offered {offered}); "
            f"this kubelet supports {', '.join(SUPPORTED_VERSIONS)}"
        )
    problem = extended_resource_name_problem(resource)
    if problem:
        return f"invalid resource name {resource!r}: {problem}"
    return None


class PluginRegistrar:
    """Connects registered plugins to the device manager."""

    def __init__(self, manager: DeviceManager, dial_timeout: float = DIAL_TIMEOUT_SECONDS):
        self._manager = manager
        self._dial_timeout = dial_timeout

    def register(self, versions: Sequence[str], resource: str, socket_path: Path) -> PluginEndpoint:
        problem = registration_problem(versions, resource)
        if problem:
            raise RegistrationError(problem)
        try:
            check_socket_path(socket_path)
        except ValueError as e:
            raise RegistrationError(str(e)) from e
        endpoint = PluginEndpoint(resource, socket_path, dial_timeout=self._dial_timeout)
        try:
            endpoint.connect()
        except EndpointError as e:
            raise RegistrationError(f"cannot connect to device plugin for {resource}: {e}") from e
        previous = self._manager.set_endpoint(endpoint)
        if previous is not None:
            log.info(
                "plugin replaced", extra={"resource": resource, "old_socket": previous.socket_path}
            )
            previous.stop()
        endpoint.start(self._manager)
        return endpoint

    def deregister(self, endpoint: PluginEndpoint) -> None:
        """Stop a plugin's endpoint; if it is still the resource's current one, the device
        manager marks its devices unhealthy and starts the grace period."""
        log.info(
            "plugin deregistered",
            extra={"resource": endpoint.resource, "socket": endpoint.socket_path},
        )
        endpoint.stop()


class RegistrationService(dp_grpc.RegistrationServicer):
    def __init__(self, registrar: PluginRegistrar, device_plugins_dir: Path) -> None:
        self._registrar = registrar
        self._dir = device_plugins_dir

    def Register(self, request: dp.RegisterRequest, context: grpc.ServicerContext) -> dp.Empty:
        log.info(
            "register request",
            extra={
                "resource": request.resource_name,
                "version": request.version,
                "endpoint": request.endpoint,
            },
        )
        # The kubelet answers a refused registration with a plain Go error, which gRPC
        # sends as code UNKNOWN carrying the message; plugins only log it.
        if not request.endpoint or "/" in request.endpoint:
            context.abort(
                grpc.StatusCode.UNKNOWN,
                f"invalid endpoint {request.endpoint!r}: must be a socket file name "
                "in the device plugin directory",
            )
        try:
            self._registrar.register(
                [request.version], request.resource_name, self._dir / request.endpoint
            )
        except RegistrationError as e:
            log.warning(
                "registration refused", extra={"resource": request.resource_name, "reason": e}
            )
            context.abort(grpc.StatusCode.UNKNOWN, str(e))
        return dp.Empty()


def remove_stale_sockets(directory: Path) -> list[Path]:
    """What a starting kubelet does to device-plugins/: delete every socket in it, so
    plugins notice and register again; the checkpoint and other files stay."""
    removed: list[Path] = []
    if not directory.is_dir():
        return removed
    for entry in sorted(directory.iterdir()):
        if entry.name == CHECKPOINT_FILE_NAME:
            continue
        try:
            if stat.S_ISSOCK(entry.lstat().st_mode):
                entry.unlink()
                removed.append(entry)
        except FileNotFoundError:
            continue
    if removed:
        log.info("stale sockets removed", extra={"dir": directory, "count": len(removed)})
    return removed
