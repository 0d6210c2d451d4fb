"""DRA health streams: the agent's own NodeWatchResources stream on each DRA driver's socket.

A DRA driver that implements `v1alpha1.DRAResourceHealth` serves it on its plugin socket, which
the kubelet-plugin helper puts at `<plugins dir>/<driver>/dra.sock` (`dra-<UID>.sock` while a
rolling update runs two instances); the kubelet is the usual client. The agent looks for those
sockets every `rescan` seconds, keeps one stream per driver (the directory names the driver),
forwards every message at once, and reconnects with back-off when a stream ends. A driver
that answers UNIMPLEMENTED has no health service: it is asked again after the longest back-off,
or at once when its socket is replaced (a driver restarted, perhaps upgraded).

Off by default, like ListAndWatch taps: nothing in the API says a driver fans its health
changes out to every stream, and a driver that does not could hand a change to the agent's
stream instead of the kubelet's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from devicedeck.agent.metrics import AgentMetrics
from devicedeck.agent.stream_thread import StreamThread
from devicedeck.kubelet.names import dns1123_subdomain_problem
from devicedeck.kubelet.paths import DRA_SOCKET_NAME, unix_target
from devicedeck.kubelet.proto import drahealth_pb2, drahealth_pb2_grpc
from devicedeck.kubelet.socket_watch import SocketId, socket_id
from devicedeck.retry import Backoff

log = logging.getLogger(__name__)

CALL = "NodeWatchResources"
# The kubelet keeps at most this much of a driver's message; so does the agent.
MESSAGE_LIMIT = 1024
STABLE_STREAM_SECONDS = 30.0
SOCKET_CHECK_SECONDS = 1.0

OnMessage = Callable[[str, list[dict[str, Any]]], None]


def find_dra_sockets(plugins_dir: Path) -> dict[str, Path]:
    """driver -> its DRA socket: dra.sock when there, else the newest dra-*.sock."""
    found: dict[str, Path] = {}
    try:
        driver_dirs = [d for d in plugins_dir.iterdir() if d.is_dir()]
    except OSError:
        return found
    for directory in sorted(driver_dirs):
        if dns1123_subdomain_problem(directory.name):
            continue
        try:
            sockets = [p for p in directory.glob("dra*.sock") if p.is_socket()]
        except OSError:
            continue
        if not sockets:
            continue
        default = directory / DRA_SOCKET_NAME
        found[directory.name] = (
            default if default in sockets else max(sockets, key=lambda p: p.stat().st_mtime)
        )
    return found


def _message(text: str) -> str:
    if len(text) <= MESSAGE_LIMIT:
        return text
    return text[: MESSAGE_LIMIT - 3] + "..."


def device_entries(response: drahealth_pb2.NodeWatchResourcesResponse) -> list[dict[str, Any]]:
    """The response in the ingest API's proto3-JSON names, in a fixed order."""
    entries = [
        {
            "device": {"poolName": d.device.pool_name, "deviceName": d.device.device_name},
            "health": drahealth_pb2.HealthStatus.Name(d.health)
            if d.health in drahealth_pb2.HealthStatus.values()
            else "UNKNOWN",
            "lastUpdatedTime": d.last_updated_time,
            "healthCheckTimeoutSeconds": d.health_check_timeout_seconds,
            "message": _message(d.message),
        }
        for d in response.devices
    ]
    return sorted(entries, key=lambda e: (e["device"]["poolName"], e["device"]["deviceName"]))


class DriverStream(StreamThread):
    """One driver's stream: connects, forwards, and starts over when the stream ends."""

    def __init__(
        self,
        driver: str,
        socket_of: Callable[[str], Path | None],
        metrics: AgentMetrics,
        *,
        backoff: Backoff,
        on_message: OnMessage,
        on_disconnect: Callable[[str], None],
    ) -> None:
        super().__init__(f"agent-dra-health-{driver}")
        self.driver = driver
        self._socket_of = socket_of
        self._metrics = metrics
        self._backoff = backoff
        self._on_message = on_message
        self._on_disconnect = on_disconnect
        # A socket whose server has no health service, and when to ask it again.
        self._unimplemented: tuple[SocketId, float] | None = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stopping:
            path = self._socket_of(self.driver)
            if path is None:
                return  # the socket is gone; the watch starts a new stream if it comes back
            identity = socket_id(path)
            if identity is not None and self._declined(identity):
                # Watched cheaply, so a driver restarted with the service is streamed at once.
                self._wait(SOCKET_CHECK_SECONDS)
                continue
            streamed_for = 0.0
            if identity is not None:
                try:
                    streamed_for = self._stream(path, identity)
                except Exception:
                    # The stream must outlive anything unforeseen; it retries after back-off.
                    log.exception(
                        "dra health error",
                        extra={"event": "dra_health_error", "driver": self.driver},
                    )
            if streamed_for >= STABLE_STREAM_SECONDS:
                self._backoff.reset()
            if identity is not None and self._declined(identity):
                continue
            self._wait(self._backoff.next_delay())

    def _declined(self, identity: SocketId) -> bool:
        """This socket answered UNIMPLEMENTED and is not due to be asked again yet."""
        if self._unimplemented is None:
            return False
        declined_by, retry_at = self._unimplemented
        return declined_by == identity and time.monotonic() < retry_at

    def _wait(self, seconds: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._stopping, timeout=max(seconds, 0.05))

    def _stream(self, path: Path, identity: SocketId) -> float:
        """Stream until it ends; returns how long it streamed."""
        started = time.monotonic()
        connected = False
        channel = grpc.insecure_channel(unix_target(path))
        try:
            stub = drahealth_pb2_grpc.DRAResourceHealthStub(channel)
            call = stub.NodeWatchResources(drahealth_pb2.NodeWatchResourcesRequest())
            with self._cond:
                self._call = call
                if self._stopping:
                    call.cancel()
            for response in call:
                if not connected:
                    connected = True
                    self._metrics.dra_health_connected.labels(self.driver).set(1)
                    log.info(
                        "dra health connected",
                        extra={
                            "event": "dra_health_connected",
                            "driver": self.driver,
                            "socket": path,
                        },
                    )
                self._on_message(self.driver, device_entries(response))
            log.info(
                "dra health stream ended",
                extra={"event": "dra_health_stream_ended", "driver": self.driver, "socket": path},
            )
        except grpc.RpcError as e:
            code = e.code() if isinstance(e, grpc.Call) else None
            if not self._stopping:
                name = code.name if code is not None else "UNKNOWN"
                self._metrics.kubelet_errors.labels(CALL, name).inc()
                log.log(
                    logging.WARNING if connected else logging.INFO,
                    "dra health failed",
                    extra={
                        "event": "dra_health_failed",
                        "driver": self.driver,
                        "socket": path,
                        "code": name,
                    },
                )
            if code is grpc.StatusCode.UNIMPLEMENTED:
                self._unimplemented = (identity, time.monotonic() + self._backoff.cap)
        finally:
            with self._cond:
                call, self._call = self._call, None
            if call is not None:
                call.cancel()
            channel.close()
            if connected:
                self._metrics.dra_health_connected.labels(self.driver).set(0)
                self._on_disconnect(self.driver)
        return time.monotonic() - started


class DraHealthWatch(StreamThread):
    """Finds DRA driver sockets under `plugins_dir` and keeps a stream open on each."""

    def __init__(
        self,
        plugins_dir: Path,
        metrics: AgentMetrics,
        *,
        rescan: float,
        max_backoff: float,
        on_message: OnMessage,
        on_disconnect: Callable[[str], None],
    ) -> None:
        super().__init__("agent-dra-health")
        self.plugins_dir = plugins_dir
        self._metrics = metrics
        self._rescan = rescan
        self._max_backoff = max_backoff
        self._on_message = on_message
        self._on_disconnect = on_disconnect
        self._sockets: dict[str, Path] = {}
        self._streams: dict[str, DriverStream] = {}

    def stop(self) -> None:
        super().stop()
        for stream in list(self._streams.values()):
            stream.stop()
        self._streams.clear()

    def _socket_of(self, driver: str) -> Path | None:
        with self._cond:
            return self._sockets.get(driver)

    def scan(self) -> None:
        """Look for sockets now; start a stream for each driver that has none running."""
        found = find_dra_sockets(self.plugins_dir)
        with self._cond:
            if self._stopping:
                return
            self._sockets = found
        for driver in found:
            stream = self._streams.get(driver)
            if stream is not None and stream.alive:
                continue
            if stream is not None:
                stream.stop()
            log.info(
                "dra socket found",
                extra={"event": "dra_socket_found", "driver": driver, "socket": found[driver]},
            )
            stream = DriverStream(
                driver,
                self._socket_of,
                self._metrics,
                backoff=Backoff(0.5, self._max_backoff),
                on_message=self._on_message,
                on_disconnect=self._on_disconnect,
            )
            self._streams[driver] = stream
            stream.start()

    def _run(self) -> None:
        while not self._stopping:
            try:
                self.scan()
            except Exception:
                log.exception(
                    "dra scan failed", extra={"event": "dra_scan_failed", "dir": self.plugins_dir}
                )
            with self._cond:
                self._cond.wait_for(lambda: self._stopping, timeout=self._rescan)
