"""The agent: builds snapshots from the kubelet reader and the taps, hands them to the pusher,
and owns every thread (reader, inotify watchers, taps, pusher, metrics server)."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devicedeck.agent.client import IngestClient
from devicedeck.agent.derived import KUBELET_RESTART_HOLD_SECONDS, DerivedHealth
from devicedeck.agent.dra_health import DraHealthWatch
from devicedeck.agent.identity import SourceIdentity, read_kernel_boot_id
from devicedeck.agent.kubelet_reader import KubeletReader, KubeletView
from devicedeck.agent.metrics import AgentMetrics, MetricsServer
from devicedeck.agent.plugin_sockets import TapSpec
from devicedeck.agent.pusher import Pusher
from devicedeck.agent.snapshots import (
    NumaMap,
    Snapshot,
    allocated_entries,
    checkpoint_numa,
    devices_by_resource,
    dra_health_snapshot,
    listandwatch_snapshot,
    listandwatch_stream,
    podresources_snapshot,
)
from devicedeck.agent.taps import TapManager
from devicedeck.agent.token import TokenSource
from devicedeck.kubelet.paths import DEFAULT_KUBELET_ROOT, KubeletPaths
from devicedeck.retry import Backoff

log = logging.getLogger(__name__)

PUSH_BACKOFF_BASE_SECONDS = 0.5
KUBELET_BACKOFF_BASE_SECONDS = 1.0


@dataclass(frozen=True)
class AgentConfig:
    node: str
    server: str
    kubelet_root: Path = DEFAULT_KUBELET_ROOT
    token_file: Path | None = None
    token: str | None = None
    taps: tuple[TapSpec, ...] = ()
    interval: float = 10.0
    # PodResources List alone, the only way to see a pod end.
    pods_interval: float = 1.0
    heartbeat: float = 30.0
    max_backoff: float = 30.0
    auth_retry: float = 60.0
    metrics_host: str = "0.0.0.0"
    metrics_port: int | None = None
    # Stream DRA drivers' health (DRAResourceHealth) from their sockets under this directory;
    # None: off.
    dra_plugins_dir: Path | None = None
    # The CA certificates an https:// server's certificate is checked against; None: the
    # system's.
    ca_file: Path | None = None


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.metrics = AgentMetrics()
        self.identity = SourceIdentity(read_kernel_boot_id(), time.time())
        self.tokens = TokenSource(config.token_file, config.token)
        self.client = IngestClient(config.server, self.tokens, ca_file=config.ca_file)
        self.paths = KubeletPaths(config.kubelet_root)
        # Sources stop feeding the heartbeat when their data is this old (seconds).
        self._freshness = 3 * config.interval + 5
        self._lock = threading.Lock()
        self._derived = DerivedHealth()
        self._view: KubeletView | None = None
        # Replaced whole, never changed in place, so it can be read without the lock.
        self._taps_live: frozenset[str] = frozenset()
        # Tapped resources whose tap has not yet finished its first try. Until it has, the
        # kubelet's view of such a resource is not reported: a new agent remembers no device,
        # so an unhealthy device, which the kubelet does not offer, would read as removed
        # until the plugin's own list arrived a moment later.
        self._taps_untried: frozenset[str] = frozenset(t.resource for t in config.taps)
        self._dra_live: frozenset[str] = frozenset()
        self._stopping = False
        self.pusher = Pusher(
            self.client,
            self.identity,
            self.metrics,
            heartbeat=config.heartbeat,
            backoff=Backoff(PUSH_BACKOFF_BASE_SECONDS, config.max_backoff),
            auth_retry=config.auth_retry,
            is_live=self._is_live,
            token_signature=self.tokens.signature,
        )
        self.taps = TapManager(
            self.paths,
            list(config.taps),
            self.metrics,
            max_backoff=config.max_backoff,
            known_devices=self._known_devices,
            known_resources=self._known_resources,
            on_message=self._tap_message,
            on_disconnect=self._tap_disconnected,
        )
        self.reader = KubeletReader(
            self.paths,
            self.metrics,
            interval=config.interval,
            pods_interval=config.pods_interval,
            backoff=Backoff(KUBELET_BACKOFF_BASE_SECONDS, config.max_backoff),
            on_change=self._kubelet_changed,
            on_plugin_sockets=self.taps.sockets_changed,
        )
        self.dra_health: DraHealthWatch | None = None
        if config.dra_plugins_dir is not None:
            self.dra_health = DraHealthWatch(
                config.dra_plugins_dir,
                self.metrics,
                rescan=config.interval,
                max_backoff=config.max_backoff,
                on_message=self._dra_health_message,
                on_disconnect=self._dra_health_disconnected,
            )
        self.metrics_server: MetricsServer | None = None
        if config.metrics_port is not None:
            self.metrics_server = MetricsServer(
                config.metrics_host, config.metrics_port, self.metrics, self.health
            )

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        log.info(
            "agent starting",
            extra={
                "event": "agent_starting",
                "node": self.config.node,
                "server": self.config.server,
                "kubelet_root": self.config.kubelet_root,
                "boot_id": self.identity.boot_id,
                "taps": ",".join(sorted(self.taps.resources)) or "-",
            },
        )
        if self.dra_health is not None:
            log.info(
                "dra health on",
                extra={"event": "dra_health_on", "plugins_dir": self.dra_health.plugins_dir},
            )
        if self.metrics_server is not None:
            self.metrics_server.start()
        self.pusher.start()
        self.taps.start()
        if self.dra_health is not None:
            self.dra_health.start()
        self.reader.start()

    def stop(self) -> None:
        # Taps ending now is the agent's doing: the resources must not fall back to derived
        # health in the service just because the agent stops.
        with self._lock:
            self._stopping = True
        self.pusher.stop()
        self.reader.stop()
        self.taps.stop()
        if self.dra_health is not None:
            self.dra_health.stop()
        self.client.close()
        if self.metrics_server is not None:
            self.metrics_server.stop()
        log.info("agent stopped", extra={"event": "agent_stopped", "node": self.config.node})

    def health(self) -> tuple[bool, dict[str, Any]]:
        ok = self.pusher.alive and self.reader.alive
        return ok, {
            "node": self.config.node,
            "boot_id": self.identity.boot_id,
            "last_push_success": self.pusher.last_success,
            "last_kubelet_success": self.reader.last_success_at,
            "pending_streams": len(self.pusher.pending()),
            "taps_connected": sorted(self._taps_live),
            "dra_health_connected": sorted(self._dra_live),
        }

    # ---- snapshots ---------------------------------------------------------------------------

    def _is_live(self, stream: str) -> bool:
        # Called by the pusher under its own lock: must not take self._lock.
        if stream.removeprefix("listandwatch/") in self._taps_live:
            return True
        if stream.startswith("dra-health/"):
            # Only the driver's open stream vouches for its devices' health.
            return stream.removeprefix("dra-health/") in self._dra_live
        return self.reader.fresh(self._freshness)

    def _known_devices(self, resource: str) -> set[str]:
        with self._lock:
            return self._derived.known(resource)

    def _known_resources(self) -> set[str]:
        with self._lock:
            return self._derived.resources()

    def _snapshots_locked(self, view: KubeletView) -> list[Snapshot]:
        node = self.config.node
        observed = view.observed_at or datetime.now(UTC)
        numa: NumaMap = defaultdict(set)
        healthy: dict[str, set[str]] | None = None
        if view.allocatable is not None and view.allocatable_supported:
            healthy = devices_by_resource(view.allocatable.devices, numa)
        elif not view.allocatable_supported and view.checkpoint is not None:
            healthy = {r: set(ids) for r, ids in view.checkpoint.registered_devices.items()}
        allocated = (
            devices_by_resource(allocated_entries(view.pods), numa) if view.pods is not None else {}
        )
        registered = view.checkpoint.registered_devices if view.checkpoint is not None else {}
        if view.checkpoint is not None:
            checkpoint_numa(view.checkpoint, numa)
        snapshots: list[Snapshot] = []
        # Device lists go first: the service then knows a device's health before a pod
        # holding it arrives, instead of creating it as Unknown.
        if healthy is not None and not view.allocatable_pending:
            restarted = view.kubelet_restarted_at
            derived = self._derived.devices(
                healthy=healthy,
                allocated=allocated,
                registered=registered,
                numa=numa,
                holding_since=restarted
                if restarted is not None
                and self.reader.since(restarted) < KUBELET_RESTART_HOLD_SECONDS
                else None,
            )
            tapped = self._taps_live | self._taps_untried
            for resource, devices in derived.items():
                if resource not in tapped:
                    snapshots.append(
                        listandwatch_snapshot(
                            node, resource, devices, health_source="derived", observed_at=observed
                        )
                    )
        if view.pods is not None:
            allocatable = view.allocatable if view.allocatable_supported else None
            snapshots.append(
                podresources_snapshot(node, view.pods, allocatable, view.checkpoint, observed)
            )
        return snapshots

    def _kubelet_changed(self, view: KubeletView) -> None:
        with self._lock:
            self._view = view
            # Offered under the lock so a tap connecting meanwhile cannot be overtaken by
            # an older derived snapshot of its resource.
            for snapshot in self._snapshots_locked(view):
                self.pusher.offer(snapshot)

    def _tap_message(
        self, resource: str, devices: list[dict[str, Any]], plugin: dict[str, Any]
    ) -> None:
        with self._lock:
            self._taps_live = self._taps_live | {resource}
            self._taps_untried = self._taps_untried - {resource}
            for device in devices:
                nodes = [n["ID"] for n in device.get("topology", {}).get("nodes", [])]
                self._derived.remember(resource, device["ID"], nodes)
            self.pusher.offer(
                listandwatch_snapshot(
                    self.config.node,
                    resource,
                    devices,
                    health_source="plugin",
                    plugin=plugin,
                    observed_at=datetime.now(UTC),
                )
            )

    def _tap_disconnected(self, resource: str) -> None:
        """The tap's stream ended, or its first try found no plugin to stream from."""
        with self._lock:
            self._taps_live = self._taps_live - {resource}
            self._taps_untried = self._taps_untried - {resource}
            if self._view is None or self._stopping:
                return
            # Until the tap is back, the resource's health is derived again.
            stream = listandwatch_stream(resource)
            for snapshot in self._snapshots_locked(self._view):
                if snapshot.stream == stream:
                    self.pusher.offer(snapshot)

    def _dra_health_message(self, driver: str, devices: list[dict[str, Any]]) -> None:
        with self._lock:
            self._dra_live = self._dra_live | {driver}
            self.pusher.offer(
                dra_health_snapshot(self.config.node, driver, devices, datetime.now(UTC))
            )

    def _dra_health_disconnected(self, driver: str) -> None:
        # The last state stays with the service, as the kubelet keeps it until its timeout.
        with self._lock:
            self._dra_live = self._dra_live - {driver}
