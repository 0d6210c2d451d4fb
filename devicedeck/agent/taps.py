"""ListAndWatch taps: the agent's own stream on a device plugin's socket, opt-in per resource.

Off by default. The kubelet API has no observer mode, and common plugins (NVIDIA's, AMD's,
kubevirt-based ones) feed every ListAndWatch stream from one shared health channel, so each
health event reaches only one stream: a second stream can take an Unhealthy transition away
from the kubelet. Tap only plugins known to fan changes out to every stream.

How the plugin's socket is found is described in plugin_sockets. Each message of an accepted
stream is forwarded at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from devicedeck.agent.metrics import AgentMetrics
from devicedeck.agent.plugin_sockets import RPC_TIMEOUT_SECONDS, Candidate, TapSpec, candidates
from devicedeck.agent.snapshots import plugin_devices
from devicedeck.agent.stream_thread import StreamThread
from devicedeck.kubelet.paths import KubeletPaths, unix_target
from devicedeck.kubelet.proto import deviceplugin_pb2, deviceplugin_pb2_grpc
from devicedeck.kubelet.socket_watch import SocketId, socket_id
from devicedeck.retry import Backoff

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
FIRST_MESSAGE_TIMEOUT_SECONDS = 5.0
# A stream that stayed up this long was healthy; the next failure starts back-off afresh.
STABLE_STREAM_SECONDS = 30.0
MAX_REMEMBERED_MISMATCHES = 256

OnMessage = Callable[[str, list[dict[str, Any]], dict[str, Any]], None]


class ResourceTap(StreamThread):
    """One resource's tap: finds the socket, streams, and starts over when the stream ends."""

    def __init__(
        self,
        paths: KubeletPaths,
        spec: TapSpec,
        metrics: AgentMetrics,
        *,
        backoff: Backoff,
        known_devices: Callable[[str], set[str]],
        known_resources: Callable[[], set[str]],
        claimed_elsewhere: Callable[[ResourceTap, Path], bool],
        on_message: OnMessage,
        on_disconnect: Callable[[str], None],
    ) -> None:
        super().__init__(f"agent-tap-{spec.resource}")
        self.paths = paths
        self.spec = spec
        self._metrics = metrics
        self._backoff = backoff
        self._known_devices = known_devices
        self._known_resources = known_resources
        self._claimed_elsewhere = claimed_elsewhere
        self._on_message = on_message
        self._on_disconnect = on_disconnect
        self._socket_events = 0
        self._mismatched: set[SocketId] = set()
        self._tried = False
        self.socket: Path | None = None

    @property
    def resource(self) -> str:
        return self.spec.resource

    def sockets_changed(self) -> None:
        with self._cond:
            self._socket_events += 1
            self._cond.notify_all()

    def _skip(self, path: Path) -> bool:
        identity = socket_id(path)
        return (
            identity is None or identity in self._mismatched or self._claimed_elsewhere(self, path)
        )

    def _run(self) -> None:
        while not self._stopping:
            with self._cond:
                seen_events = self._socket_events
            try:
                streamed_for = self._connect_once()
            except Exception:
                # The tap must outlive anything unforeseen; it retries after back-off.
                log.exception("tap error", extra={"event": "tap_error", "resource": self.resource})
                streamed_for = 0.0
            if not self._tried and not self._stopping:
                # No plugin streamed on the first try (an accepted stream sets _tried): the
                # agent reports the resource from the kubelet's view until one does.
                self._tried = True
                self._on_disconnect(self.resource)
            if streamed_for >= STABLE_STREAM_SECONDS:
                self._backoff.reset()
            if self._wait_for_socket_change(seen_events, self._backoff.next_delay()):
                # A changed socket is a plugin (or kubelet) that owes nothing to earlier
                # failures. A new socket's file exists from bind(), before the plugin listens,
                # so the try it wakes can be refused; the retry must then come soon, not after
                # the back-off built up while the plugin was away.
                self._backoff.reset()

    def _connect_once(self) -> float:
        """Try the candidates in order until one streams; returns how long it streamed."""
        known = self._known_devices(self.resource)
        found = candidates(
            self.paths,
            self.spec,
            known_devices=known,
            skip=self._skip,
            other_resources=self._known_resources(),
        )
        for candidate in found:
            if self._stopping:
                break
            accepted, streamed_for = self._stream(candidate, known)
            if accepted:
                return streamed_for
        return 0.0

    def _wait_for_socket_change(self, seen_events: int, delay: float) -> bool:
        """Wait out `delay`; True when a socket change ended the wait early."""
        # A socket created meanwhile is worth trying at once.
        with self._cond:
            self._cond.wait_for(
                lambda: self._stopping or self._socket_events != seen_events,
                timeout=max(delay, 0.05),
            )
            return self._socket_events != seen_events

    def _stream(self, candidate: Candidate, known: set[str]) -> tuple[bool, float]:
        """Stream from one candidate socket. Returns (accepted, seconds streamed)."""
        started = time.monotonic()
        accepted = False
        channel = grpc.insecure_channel(unix_target(candidate.path))
        timer: threading.Timer | None = None
        try:
            stub = deviceplugin_pb2_grpc.DevicePluginStub(channel)
            options = stub.GetDevicePluginOptions(
                deviceplugin_pb2.Empty(), timeout=RPC_TIMEOUT_SECONDS
            )
            call = stub.ListAndWatch(deviceplugin_pb2.Empty())
            with self._cond:
                self._call = call
                if self._stopping:
                    call.cancel()
            # A plugin that never sends a first message must not hold the tap forever.
            timer = threading.Timer(FIRST_MESSAGE_TIMEOUT_SECONDS, call.cancel)
            timer.daemon = True
            timer.start()
            plugin = self._plugin_info(candidate.path, options)
            for response in call:
                devices = plugin_devices(response)
                if not accepted:
                    timer.cancel()
                    if candidate.verify and not known & {d["ID"] for d in devices}:
                        self._mismatch(candidate)
                        return False, 0.0
                    accepted = True
                    self._tried = True
                    self.socket = candidate.path
                    self._metrics.tap_connected.labels(self.resource).set(1)
                    log.info(
                        "tap connected",
                        extra={
                            "event": "tap_connected",
                            "resource": self.resource,
                            "socket": candidate.path,
                            "method": candidate.method,
                        },
                    )
                self._on_message(self.resource, devices, plugin)
            log.info(
                "tap stream ended",
                extra={
                    "event": "tap_stream_ended",
                    "resource": self.resource,
                    "socket": candidate.path,
                },
            )
        except grpc.RpcError as e:
            code = e.code() if isinstance(e, grpc.Call) else None
            if not self._stopping:
                name = code.name if code is not None else "UNKNOWN"
                self._metrics.kubelet_errors.labels("ListAndWatch", name).inc()
                log.log(
                    logging.WARNING if accepted else logging.DEBUG,
                    "tap failed",
                    extra={
                        "event": "tap_failed",
                        "resource": self.resource,
                        "socket": candidate.path,
                        "code": name,
                    },
                )
            if not accepted and code is grpc.StatusCode.UNIMPLEMENTED:
                self._mismatch(candidate)  # not a device plugin
        finally:
            if timer is not None:
                timer.cancel()
                timer.join()
            with self._cond:
                call, self._call = self._call, None
            if call is not None:
                call.cancel()
            channel.close()
            if accepted:
                self.socket = None
                self._metrics.tap_connected.labels(self.resource).set(0)
                self._on_disconnect(self.resource)
        return accepted, time.monotonic() - started

    def _mismatch(self, candidate: Candidate) -> None:
        identity = socket_id(candidate.path)
        if identity is None or candidate.method == "named":
            return
        if len(self._mismatched) >= MAX_REMEMBERED_MISMATCHES:
            self._mismatched.clear()
        self._mismatched.add(identity)
        log.info(
            "tap socket skipped",
            extra={
                "event": "tap_socket_skipped",
                "resource": self.resource,
                "socket": candidate.path,
                "reason": "not_this_resource",
            },
        )

    def _plugin_info(
        self, path: Path, options: deviceplugin_pb2.DevicePluginOptions
    ) -> dict[str, Any]:
        endpoint = path.name if path.parent == self.paths.device_plugins_dir else str(path)
        return {
            "endpoint": endpoint,
            "version": API_VERSION,
            "options": {
                "pre_start_required": options.pre_start_required,
                "get_preferred_allocation_available": options.get_preferred_allocation_available,
            },
        }


class TapManager:
    def __init__(
        self,
        paths: KubeletPaths,
        specs: list[TapSpec],
        metrics: AgentMetrics,
        *,
        max_backoff: float,
        known_devices: Callable[[str], set[str]],
        known_resources: Callable[[], set[str]],
        on_message: OnMessage,
        on_disconnect: Callable[[str], None],
    ) -> None:
        self.taps = [
            ResourceTap(
                paths,
                spec,
                metrics,
                backoff=Backoff(0.5, max_backoff),
                known_devices=known_devices,
                known_resources=known_resources,
                claimed_elsewhere=self._claimed_elsewhere,
                on_message=on_message,
                on_disconnect=on_disconnect,
            )
            for spec in specs
        ]

    def _claimed_elsewhere(self, asking: ResourceTap, path: Path) -> bool:
        return any(t is not asking and t.socket == path for t in self.taps)

    @property
    def resources(self) -> set[str]:
        return {t.resource for t in self.taps}

    def start(self) -> None:
        for tap in self.taps:
            tap.start()

    def stop(self) -> None:
        for tap in self.taps:
            tap.stop()

    def sockets_changed(self, created: set[str], removed: set[str]) -> None:
        for tap in self.taps:
            tap.sockets_changed()
