"""The kubelet's plugin watcher for plugins_registry/, reduced to device plugins.

inotify events feed a desired state of the world (socket path -> the time it appeared);
a reconciler compares it every second with the actual state (the plugins registered from
that directory). A new socket is asked GetInfo; a plugin of type "DevicePlugin" offering a
supported version and a valid resource name is connected like a classic registration and
told the outcome through NotifyRegistrationStatus. A socket that disappears (or is
re-created) deregisters its plugin. Failed registrations are retried with a doubling
back-off, as the kubelet's operation executor does. Names starting with "." are ignored.

PluginInfo.endpoint names the plugin's DevicePlugin socket: an absolute path is used as
it is, a bare name is taken relative to device-plugins/, and an empty one means the
registration socket itself also serves DevicePlugin.
"""

from __future__ import annotations

import logging
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from devicedeck.kubelet.proto import pluginregistration_pb2 as preg
from devicedeck.kubelet.proto import pluginregistration_pb2_grpc as preg_grpc
from devicedeck.kubelet.socket_watch import DirectoryWatcher
from devicedeck.retry import NO_JITTER, Backoff
from devicedeck.sim.kubelet.endpoint import PluginEndpoint
from devicedeck.sim.kubelet.registration import PluginRegistrar, RegistrationError

log = logging.getLogger(__name__)

DEVICE_PLUGIN_TYPE = "DevicePlugin"
# The kubelet's plugin watcher gives a plugin socket one second to answer.
PLUGIN_RPC_TIMEOUT_SECONDS = 1.0
DEFAULT_RECONCILE_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 120.0


@dataclass
class _Registered:
    stamp: float
    endpoint: PluginEndpoint


@dataclass
class _Failure:
    stamp: float
    retry_at: float
    backoff: Backoff


class PluginWatcher:
    def __init__(
        self,
        registry_dir: Path,
        device_plugins_dir: Path,
        registrar: PluginRegistrar,
        reconcile_seconds: float = DEFAULT_RECONCILE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._registry_dir = registry_dir
        self._device_plugins_dir = device_plugins_dir
        self._registrar = registrar
        self._period = reconcile_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._desired: dict[Path, float] = {}
        self._actual: dict[Path, _Registered] = {}
        self._failures: dict[Path, _Failure] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._dir_watcher: DirectoryWatcher | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._registry_dir.mkdir(parents=True, exist_ok=True)
        # Watch first, then scan, so a socket created in between is not missed.
        self._dir_watcher = DirectoryWatcher(
            self._registry_dir, self._on_change, name="plugin-watcher inotify"
        )
        self._dir_watcher.start()
        self._on_change({p.name for p in self._registry_dir.iterdir()}, set())
        self._thread = threading.Thread(target=self._run, name="plugin-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._dir_watcher is not None:
            self._dir_watcher.stop()
            self._dir_watcher = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            registered = list(self._actual.values())
            self._actual.clear()
        for entry in registered:
            entry.endpoint.stop()

    def registered_sockets(self) -> dict[Path, str]:
        """Registry socket -> resource name, for the plugins registered from the directory."""
        with self._lock:
            return {path: r.endpoint.resource for path, r in self._actual.items()}

    def _on_change(self, created: set[str], removed: set[str]) -> None:
        with self._lock:
            for name in removed:
                self._desired.pop(self._registry_dir / name, None)
            for name in created:
                path = self._registry_dir / name
                if name.startswith(".") or not _is_socket(path):
                    continue
                # A fresh stamp tells the reconciler this is a new socket even if the
                # path is the same as a plugin registered before.
                self._desired[path] = self._clock()
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile()
            except Exception:
                # The loop must survive any single plugin misbehaving.
                log.exception("plugin watcher reconcile failed", extra={"dir": self._registry_dir})
            self._wake.wait(self._period)
            self._wake.clear()

    def reconcile(self) -> None:
        with self._lock:
            desired = dict(self._desired)
            gone = [
                (path, entry)
                for path, entry in self._actual.items()
                if desired.get(path) != entry.stamp
            ]
            for path, _ in gone:
                del self._actual[path]
            for path in list(self._failures):
                if desired.get(path) != self._failures[path].stamp:
                    del self._failures[path]
        for path, entry in gone:
            log.info(
                "plugin socket removed", extra={"path": path, "resource": entry.endpoint.resource}
            )
            self._registrar.deregister(entry.endpoint)
        now = self._clock()
        for path, stamp in sorted(desired.items()):
            if self._stop.is_set():
                return
            with self._lock:
                failure = self._failures.get(path)
                if path in self._actual or (failure is not None and now < failure.retry_at):
                    continue
            endpoint = self._register(path)
            with self._lock:
                if endpoint is not None:
                    self._failures.pop(path, None)
                    self._actual[path] = _Registered(stamp=stamp, endpoint=endpoint)
                else:
                    if failure is None:
                        # The kubelet's operation executor doubles its wait without jitter.
                        backoff = Backoff(self._period, MAX_BACKOFF_SECONDS, jitter=NO_JITTER)
                        failure = self._failures[path] = _Failure(stamp, 0.0, backoff)
                    failure.retry_at = self._clock() + failure.backoff.next_delay()

    def _register(self, path: Path) -> PluginEndpoint | None:
        channel = grpc.insecure_channel(f"unix:{path}")
        try:
            stub = preg_grpc.RegistrationStub(channel)
            try:
                info = stub.GetInfo(
                    preg.InfoRequest(), timeout=PLUGIN_RPC_TIMEOUT_SECONDS, wait_for_ready=True
                )
            except grpc.RpcError as e:
                log.warning("plugin GetInfo failed", extra={"path": path, "error": e})
                return None
            endpoint: PluginEndpoint | None = None
            error = ""
            if info.type != DEVICE_PLUGIN_TYPE:
                error = f"plugin type {info.type!r} is not handled by this kubelet"
            else:
                try:
                    endpoint = self._registrar.register(
                        list(info.supported_versions), info.name, self._endpoint_path(path, info)
                    )
                except RegistrationError as e:
                    error = str(e)
            log.info(
                "plugin watcher registration",
                extra={
                    "path": path,
                    "resource": info.name,
                    "registered": endpoint is not None,
                    "error": error or "none",
                },
            )
            try:
                stub.NotifyRegistrationStatus(
                    preg.RegistrationStatus(plugin_registered=endpoint is not None, error=error),
                    timeout=PLUGIN_RPC_TIMEOUT_SECONDS,
                )
            except grpc.RpcError as e:
                # The kubelet keeps a registration even if the plugin missed the news.
                log.warning(
                    "plugin NotifyRegistrationStatus failed", extra={"path": path, "error": e}
                )
            return endpoint
        finally:
            channel.close()

    def _endpoint_path(self, registry_socket: Path, info: preg.PluginInfo) -> Path:
        if not info.endpoint:
            return registry_socket
        endpoint = Path(info.endpoint)
        return endpoint if endpoint.is_absolute() else self._device_plugins_dir / endpoint


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except OSError:
        return False
