"""The simulated kubelet's device manager: devices per resource, endpoints, pod assignments.

It follows the kubelet's device manager:

- each ListAndWatch message replaces the whole device list of its resource; capacity counts
  every device, allocatable only the ``Healthy`` ones (anything else is unhealthy);
- when a plugin's stream ends, all its devices turn unhealthy and the endpoint is stopped;
  a stopped endpoint older than the grace period (5 minutes by default) drops the resource,
  whose capacity is then reported as 0 rather than removed;
- pod assignments are kept as pod UID -> container -> resource -> NUMA node -> device ids,
  with the plugin's ContainerAllocateResponse; assignments of pods that are no longer active
  are garbage-collected lazily (before an allocation or a List), as the kubelet does;
- the checkpoint is rewritten after every ListAndWatch update, every allocation and when a
  resource is dropped; it records the healthy set of every resource.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from devicedeck.kubelet.checkpoint import Checkpoint, ContainerAllocation, PodDeviceEntry
from devicedeck.kubelet.proto import deviceplugin_pb2 as dp
from devicedeck.sim.kubelet.endpoint import PluginEndpoint

log = logging.getLogger(__name__)

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
# The kubelet's endpointStopGracePeriod.
DEFAULT_GRACE_SECONDS = 300.0
# Key the kubelet uses for devices whose plugin reported no NUMA topology.
NO_TOPOLOGY = -1


@dataclass(frozen=True)
class DeviceInfo:
    id: str
    health: str
    numa_nodes: tuple[int, ...] = ()

    @property
    def healthy(self) -> bool:
        return self.health == HEALTHY

    @classmethod
    def from_proto(cls, device: dp.Device) -> DeviceInfo:
        return cls(
            id=device.ID,
            health=device.health,
            numa_nodes=tuple(node.ID for node in device.topology.nodes),
        )


@dataclass(frozen=True)
class Assignment:
    """The devices of one resource held by one container, as the checkpoint records them."""

    resource: str
    ids_by_numa: dict[int, tuple[str, ...]]
    allocation: ContainerAllocation

    @property
    def device_ids(self) -> set[str]:
        return {i for ids in self.ids_by_numa.values() for i in ids}


@dataclass(frozen=True)
class CheckpointState:
    entries: list[PodDeviceEntry]
    # Resource name -> healthy device ids at write time.
    registered: dict[str, list[str]]


@dataclass
class _Resource:
    devices: dict[str, DeviceInfo] = field(default_factory=dict)
    endpoint: PluginEndpoint | None = None
    # Monotonic time the endpoint stopped; None while a plugin stream is live.
    stopped_at: float | None = None


def ids_by_numa(devices: Iterable[DeviceInfo]) -> dict[int, tuple[str, ...]]:
    """Group device ids by NUMA node; a device on two nodes is listed under both."""
    grouped: dict[int, list[str]] = {}
    for device in devices:
        for node in device.numa_nodes or (NO_TOPOLOGY,):
            grouped.setdefault(node, []).append(device.id)
    return {node: tuple(sorted(ids)) for node, ids in sorted(grouped.items())}


class DeviceManager:
    def __init__(
        self,
        write_checkpoint: Callable[[CheckpointState], None],
        grace_seconds: float = DEFAULT_GRACE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write_checkpoint = write_checkpoint
        self._grace = grace_seconds
        self._clock = clock
        self._lock = threading.RLock()
        self._resources: dict[str, _Resource] = {}
        # Resources dropped after their grace period: node capacity shows them as 0.
        self._dropped: set[str] = set()
        self._pod_devices: dict[str, dict[str, dict[str, Assignment]]] = {}
        self._closing = False
        self.changed = threading.Condition(self._lock)

    # --- restore and shutdown -------------------------------------------------------------

    def restore(self, checkpoint: Checkpoint) -> None:
        """Load a previous run's checkpoint: assignments kept, resources without endpoint."""
        with self._lock:
            for entry in checkpoint.entries:
                assignment = Assignment(
                    resource=entry.resource_name,
                    ids_by_numa={n: tuple(ids) for n, ids in sorted(entry.device_ids.items())},
                    allocation=entry.allocation,
                )
                pod = self._pod_devices.setdefault(entry.pod_uid, {})
                pod.setdefault(entry.container_name, {})[entry.resource_name] = assignment
            now = self._clock()
            for resource in checkpoint.registered_devices:
                # Capacity stays 0 until the plugin registers again; the grace period runs.
                self._resources[resource] = _Resource(stopped_at=now)

    def close(self) -> None:
        """Ignore the stream ends caused by shutting down: they are not plugin failures."""
        with self._lock:
            self._closing = True

    # --- endpoints ------------------------------------------------------------------------

    def set_endpoint(self, endpoint: PluginEndpoint) -> PluginEndpoint | None:
        """Make endpoint the resource's plugin; returns the one it replaces (to be stopped)."""
        with self._lock:
            state = self._resources.setdefault(endpoint.resource, _Resource())
            previous = state.endpoint
            state.endpoint = endpoint
            state.stopped_at = None
            self._dropped.discard(endpoint.resource)
            self.changed.notify_all()
        log.info(
            "plugin registered",
            extra={"resource": endpoint.resource, "socket": endpoint.socket_path},
        )
        return previous

    def current_endpoint(self, resource: str) -> PluginEndpoint | None:
        with self._lock:
            state = self._resources.get(resource)
            if state is None or state.stopped_at is not None:
                return None
            return state.endpoint

    def endpoints(self) -> list[PluginEndpoint]:
        with self._lock:
            return [s.endpoint for s in self._resources.values() if s.endpoint is not None]

    def devices_updated(self, endpoint: PluginEndpoint, devices: Sequence[dp.Device]) -> None:
        with self._lock:
            state = self._resources.get(endpoint.resource)
            if self._closing or state is None or state.endpoint is not endpoint:
                return
            state.devices = {d.ID: DeviceInfo.from_proto(d) for d in devices}
            healthy = sum(1 for d in state.devices.values() if d.healthy)
            log.info(
                "devices updated",
                extra={
                    "resource": endpoint.resource,
                    "capacity": len(state.devices),
                    "allocatable": healthy,
                },
            )
            self._save_locked()
            self.changed.notify_all()

    def endpoint_stopped(self, endpoint: PluginEndpoint) -> None:
        with self._lock:
            state = self._resources.get(endpoint.resource)
            if self._closing or state is None or state.endpoint is not endpoint:
                return
            state.stopped_at = self._clock()
            state.devices = {
                i: DeviceInfo(i, UNHEALTHY, d.numa_nodes) for i, d in state.devices.items()
            }
            log.info(
                "plugin stream ended",
                extra={
                    "resource": endpoint.resource,
                    "devices": len(state.devices),
                    "grace_seconds": self._grace,
                },
            )
            self._save_locked()
            self.changed.notify_all()

    def expire_stopped(self) -> list[str]:
        """Drop resources whose endpoint has been stopped longer than the grace period."""
        with self._lock:
            now = self._clock()
            expired = [
                name
                for name, state in self._resources.items()
                if state.stopped_at is not None and now - state.stopped_at >= self._grace
            ]
            for name in expired:
                del self._resources[name]
                self._dropped.add(name)
                log.info("resource dropped after grace", extra={"resource": name})
            if expired:
                self._save_locked()
                self.changed.notify_all()
            return expired

    # --- what the node reports ------------------------------------------------------------

    def capacity(self) -> dict[str, int]:
        self.expire_stopped()
        with self._lock:
            result = {name: 0 for name in self._dropped}
            result.update({n: len(s.devices) for n, s in self._resources.items()})
            return dict(sorted(result.items()))

    def allocatable(self) -> dict[str, int]:
        self.expire_stopped()
        with self._lock:
            result = {name: 0 for name in self._dropped}
            result.update(
                {n: sum(d.healthy for d in s.devices.values()) for n, s in self._resources.items()}
            )
            return dict(sorted(result.items()))

    def devices(self, resource: str) -> list[DeviceInfo]:
        with self._lock:
            state = self._resources.get(resource)
            return sorted(state.devices.values(), key=lambda d: d.id) if state else []

    def healthy_devices(self) -> dict[str, list[DeviceInfo]]:
        with self._lock:
            return {
                name: sorted((d for d in s.devices.values() if d.healthy), key=lambda d: d.id)
                for name, s in sorted(self._resources.items())
            }

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until predicate (called with the manager locked) holds after a change."""
        with self.changed:
            return self.changed.wait_for(predicate, timeout)

    def known_resource(self, resource: str) -> bool:
        with self._lock:
            return resource in self._resources

    # --- pod assignments ------------------------------------------------------------------

    def remove_inactive_pods(self, active_uids: set[str]) -> None:
        """The kubelet's UpdateAllocatedDevices: forget devices of pods that are gone."""
        with self._lock:
            for uid in set(self._pod_devices) - active_uids:
                del self._pod_devices[uid]
                log.info("pod devices released", extra={"pod_uid": uid})

    def free_healthy_devices(self, resource: str) -> list[DeviceInfo]:
        with self._lock:
            state = self._resources.get(resource)
            if state is None:
                return []
            taken = self._allocated_ids_locked(resource)
            return sorted(
                (d for d in state.devices.values() if d.healthy and d.id not in taken),
                key=lambda d: d.id,
            )

    def record_assignment(self, pod_uid: str, container: str, assignment: Assignment) -> None:
        with self._lock:
            pod = self._pod_devices.setdefault(pod_uid, {})
            pod.setdefault(container, {})[assignment.resource] = assignment
            self._save_locked()
            self.changed.notify_all()

    def forget_pod(self, pod_uid: str) -> None:
        """Drop a pod's assignments at once (admission rolled back)."""
        with self._lock:
            if self._pod_devices.pop(pod_uid, None) is not None:
                self._save_locked()

    def assignments(self, pod_uid: str) -> dict[str, dict[str, Assignment]]:
        with self._lock:
            pod = self._pod_devices.get(pod_uid, {})
            return {container: dict(by_resource) for container, by_resource in pod.items()}

    def _allocated_ids_locked(self, resource: str) -> set[str]:
        taken: set[str] = set()
        for pod in self._pod_devices.values():
            for by_resource in pod.values():
                assignment = by_resource.get(resource)
                if assignment is not None:
                    taken |= assignment.device_ids
        return taken

    # --- checkpoint -----------------------------------------------------------------------

    def checkpoint_state(self) -> CheckpointState:
        with self._lock:
            entries = [
                PodDeviceEntry(
                    pod_uid=uid,
                    container_name=container,
                    resource_name=assignment.resource,
                    device_ids={n: list(ids) for n, ids in assignment.ids_by_numa.items()},
                    allocation=assignment.allocation,
                )
                for uid, pod in sorted(self._pod_devices.items())
                for container, by_resource in sorted(pod.items())
                for _, assignment in sorted(by_resource.items())
            ]
            registered = {
                name: sorted(d.id for d in s.devices.values() if d.healthy)
                for name, s in sorted(self._resources.items())
            }
            return CheckpointState(entries=entries, registered=registered)

    def _save_locked(self) -> None:
        try:
            self._write_checkpoint(self.checkpoint_state())
        except OSError as e:
            # The kubelet logs and carries on when the checkpoint cannot be written.
            log.error("checkpoint write failed", extra={"error": e})
