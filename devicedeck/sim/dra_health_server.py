"""The simulated DRA driver's health stream: `v1alpha1.DRAResourceHealth/NodeWatchResources`
on the driver's plugin socket, as a real driver serves it to the kubelet.

Every stream gets the full device list at once and again after each change; every stream sees
every change (a client more does not take changes away from the others). Health is changed
through `set_health`, which the sim's control socket exposes (`sim-ctl dra health`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from devicedeck.kubelet.paths import check_socket_path, unix_target
from devicedeck.kubelet.proto import drahealth_pb2, drahealth_pb2_grpc
from devicedeck.sim.kubelet.control import CONTROL_DIR_NAME, ControlError

log = logging.getLogger(__name__)

DRA_CONTROL_SOCKET_NAME = "dra-driver.sock"
HEALTH_NAMES = {"Healthy": "HEALTHY", "Unhealthy": "UNHEALTHY", "Unknown": "UNKNOWN"}
# How often an idle stream checks that its client is still there.
IDLE_CHECK_SECONDS = 0.5
MAX_STREAMS = 8


@dataclass(frozen=True)
class DeviceState:
    health: str  # HEALTHY, UNHEALTHY or UNKNOWN
    message: str
    checked_at: int


class _Service(drahealth_pb2_grpc.DRAResourceHealthServicer):
    def __init__(self, server: SimDraHealthServer) -> None:
        self._server = server

    def NodeWatchResources(
        self, request: drahealth_pb2.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[drahealth_pb2.NodeWatchResourcesResponse]:
        sent = -1
        while context.is_active():
            version, response = self._server.wait_for_change(sent, IDLE_CHECK_SECONDS)
            if response is None:
                return
            if version != sent:
                sent = version
                yield response


class SimDraHealthServer:
    def __init__(
        self,
        socket_path: Path,
        pool: str,
        devices: list[str],
        *,
        timeout_seconds: int = 60,
        unhealthy: dict[str, str] | None = None,
    ) -> None:
        check_socket_path(socket_path)
        self.socket_path = socket_path
        self.pool = pool
        self.timeout_seconds = timeout_seconds
        now = int(time.time())
        broken = unhealthy or {}
        self._devices = {
            name: DeviceState(
                "UNHEALTHY" if name in broken else "HEALTHY", broken.get(name, ""), now
            )
            for name in devices
        }
        self._cond = threading.Condition()
        self._version = 0
        self._stopping = False
        self._server: grpc.Server | None = None

    # ---- state --------------------------------------------------------------------------

    def set_health(self, device: str, health: str, message: str = "") -> None:
        """health: Healthy, Unhealthy or Unknown. ValueError names what is wrong."""
        if health not in HEALTH_NAMES:
            raise ValueError(f"health must be one of {', '.join(HEALTH_NAMES)}, got {health!r}")
        with self._cond:
            if device not in self._devices:
                raise ValueError(
                    f"no device {device!r}; the driver has {', '.join(sorted(self._devices))}"
                )
            self._devices[device] = DeviceState(HEALTH_NAMES[health], message, int(time.time()))
            self._version += 1
            self._cond.notify_all()
        log.info("DRA device health set", extra={"device": device, "health": health})

    def status(self) -> dict[str, Any]:
        with self._cond:
            devices = dict(self._devices)
        return {
            "socket": str(self.socket_path),
            "pool": self.pool,
            "devices": {
                name: {"health": s.health, "message": s.message, "checked_at": s.checked_at}
                for name, s in sorted(devices.items())
            },
        }

    def _response_locked(self) -> drahealth_pb2.NodeWatchResourcesResponse:
        return drahealth_pb2.NodeWatchResourcesResponse(
            devices=[
                drahealth_pb2.DeviceHealth(
                    device=drahealth_pb2.DeviceIdentifier(pool_name=self.pool, device_name=name),
                    health=state.health,
                    last_updated_time=state.checked_at,
                    health_check_timeout_seconds=self.timeout_seconds,
                    message=state.message,
                )
                for name, state in sorted(self._devices.items())
            ]
        )

    def wait_for_change(
        self, seen: int, timeout: float
    ) -> tuple[int, drahealth_pb2.NodeWatchResourcesResponse | None]:
        """The current version and full state once it differs from `seen` (or after timeout);
        None as the state when the server stops."""
        with self._cond:
            self._cond.wait_for(lambda: self._stopping or self._version != seen, timeout)
            if self._stopping:
                return self._version, None
            return self._version, self._response_locked()

    # ---- serving ------------------------------------------------------------------------

    def start(self) -> None:
        self.socket_path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        with self._cond:
            self._stopping = False
        server = grpc.server(ThreadPoolExecutor(max_workers=MAX_STREAMS))
        drahealth_pb2_grpc.add_DRAResourceHealthServicer_to_server(_Service(self), server)
        server.add_insecure_port(unix_target(self.socket_path))
        server.start()
        self._server = server
        log.info("DRA health stream serving", extra={"socket": self.socket_path})

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._server is not None:
            self._server.stop(grace=1.0).wait()
            self._server = None
        self.socket_path.unlink(missing_ok=True)


def dra_control_socket_path(root: Path | str) -> Path:
    """The simulated DRA driver's control socket, next to the sim-kubelet's own."""
    return Path(root) / CONTROL_DIR_NAME / DRA_CONTROL_SOCKET_NAME


def control_dispatch(server: SimDraHealthServer) -> Callable[[dict[str, Any]], Any]:
    """Control operations: `dra.health` (device, health, message?) and `dra.status`."""

    def dispatch(request: dict[str, Any]) -> Any:
        op = request["op"]
        if op == "dra.status":
            return server.status()
        if op == "dra.health":
            device, health = request.get("device"), request.get("health")
            message = request.get("message") or ""
            if not (
                isinstance(device, str) and isinstance(health, str) and isinstance(message, str)
            ):
                raise ControlError("dra.health needs string device, health and message")
            try:
                server.set_health(device, health, message)
            except ValueError as e:
                raise ControlError(str(e)) from e
            return server.status()["devices"][device]
        raise ControlError(f"unknown op {op!r}; the DRA driver knows dra.health, dra.status")

    return dispatch
