"""Pod admission: the device part of what the kubelet does when a pod is created.

For each container and each extended resource it requests, in order: forget devices of
pods that are gone, take the healthy devices no active pod holds, narrow them to NUMA nodes
as the topology manager policy says (topology.py; with the default policy, none, not at all),
let the plugin choose through GetPreferredAllocation when it offers that, then call Allocate
with exactly one container request and record the devices
(keyed by NUMA node) and the plugin's ContainerAllocateResponse. PreStartContainer follows
for plugins that require it. A request that cannot be met rejects the whole pod with a
reason and leaves no devices assigned. Admissions are serialised, as in the kubelet.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from devicedeck.kubelet.checkpoint import ContainerAllocation
from devicedeck.sim.kubelet.devices import Assignment, DeviceManager, ids_by_numa
from devicedeck.sim.kubelet.endpoint import EndpointError
from devicedeck.sim.kubelet.pods import (
    ContainerSpec,
    Pod,
    PodSpecError,
    PodStore,
    validate_containers,
    validate_pod_identity,
)
from devicedeck.sim.kubelet.topology import (
    DEFAULT_POLICY,
    POLICIES,
    TopologyAffinityError,
    candidates,
)

log = logging.getLogger(__name__)


class AdmissionError(Exception):
    """A pod was refused; the message is the reason shown to the user."""


class PodAdmitter:
    def __init__(
        self,
        pods: PodStore,
        manager: DeviceManager,
        new_uid: Callable[[], str] | None = None,
        topology_policy: str = DEFAULT_POLICY,
    ):
        if topology_policy not in POLICIES:
            raise ValueError(f"topology manager policy must be one of {', '.join(POLICIES)}")
        self.topology_policy = topology_policy
        self._pods = pods
        self._manager = manager
        self._new_uid = new_uid or (lambda: str(uuid.uuid4()))
        self._lock = threading.Lock()
        self._admitting: set[str] = set()

    def active_uids(self) -> set[str]:
        """Pods that hold devices: the active ones plus any being admitted right now."""
        return self._pods.active_uids() | set(self._admitting)

    def create_pod(
        self,
        namespace: str,
        name: str,
        containers: Sequence[ContainerSpec],
        uid: str | None = None,
    ) -> Pod:
        """Admit a pod; `uid` is the one the API server gave its Pod object, if there is one."""
        spec = tuple(containers)
        try:
            validate_pod_identity(namespace, name)
            validate_containers(spec)
        except PodSpecError as e:
            raise AdmissionError(str(e)) from e
        with self._lock:
            if self._pods.find(namespace, name) is not None:
                raise AdmissionError(f"pod {namespace}/{name} already exists")
            pod = Pod(uid=uid or self._new_uid(), namespace=namespace, name=name, containers=spec)
            self._admitting.add(pod.uid)
            try:
                self._manager.remove_inactive_pods(self.active_uids())
                self._allocate_pod(pod)
                self._pods.add(pod)
            except BaseException:
                self._manager.forget_pod(pod.uid)
                raise
            finally:
                self._admitting.discard(pod.uid)
        log.info("pod admitted", extra={"pod": pod.key, "uid": pod.uid})
        return pod

    def delete_pod(self, namespace: str, name: str) -> Pod:
        """Remove a pod. Its devices are freed lazily, at the next allocation or List, and
        its checkpoint entries stay until the next checkpoint write, as with the kubelet."""
        with self._lock:
            pod = self._pods.find(namespace, name)
            if pod is None:
                raise AdmissionError(f"pod {namespace}/{name} not found")
            self._pods.remove(pod.uid)
        log.info("pod deleted", extra={"pod": pod.key, "uid": pod.uid})
        return pod

    def _allocate_pod(self, pod: Pod) -> None:
        for container in pod.containers:
            for resource, count in sorted(container.requests.items()):
                try:
                    self._allocate(pod, container.name, resource, count)
                except (AdmissionError, EndpointError) as e:
                    reason = f"pod {pod.key} rejected: container {container.name}: {e}"
                    log.warning("pod admission failed", extra={"pod": pod.key, "reason": e})
                    raise AdmissionError(reason) from e
        # Containers would start now; plugins that asked for it hear about each one first.
        assignments = self._manager.assignments(pod.uid)
        for container in pod.containers:
            for resource, assignment in sorted(assignments.get(container.name, {}).items()):
                endpoint = self._manager.current_endpoint(resource)
                if endpoint is None or not endpoint.options.pre_start_required:
                    continue
                try:
                    endpoint.pre_start_container(sorted(assignment.device_ids))
                except EndpointError as e:
                    raise AdmissionError(
                        f"pod {pod.key} rejected: container {container.name}: {e}"
                    ) from e

    def _allocate(self, pod: Pod, container: str, resource: str, count: int) -> None:
        if not self._manager.known_resource(resource):
            raise AdmissionError(f"resource {resource} is not provided by any device plugin")
        endpoint = self._manager.current_endpoint(resource)
        if endpoint is None:
            raise AdmissionError(
                f"the device plugin for {resource} is not connected (its endpoint stopped)"
            )
        free = self._manager.free_healthy_devices(resource)
        if len(free) < count:
            devices = self._manager.devices(resource)
            unhealthy = sum(1 for d in devices if not d.healthy)
            raise AdmissionError(
                f"not enough free healthy {resource} devices: requested {count}, "
                f"free {len(free)} (total {len(devices)}, unhealthy {unhealthy})"
            )
        healthy = [d for d in self._manager.devices(resource) if d.healthy]
        try:
            allowed = candidates(self.topology_policy, free, healthy, count)
        except TopologyAffinityError as e:
            raise AdmissionError(f"{resource}: {e} (policy {self.topology_policy})") from e
        by_id = {d.id: d for d in allowed}
        chosen: list[str] = []
        if endpoint.options.get_preferred_allocation_available:
            preferred = endpoint.preferred_allocation(sorted(by_id), [], count)
            chosen = [i for i in dict.fromkeys(preferred) if i in by_id][:count]
            if len(chosen) != len(preferred):
                log.warning(
                    "preferred allocation ignored partly",
                    extra={"resource": resource, "preferred": preferred},
                )
        chosen += [i for i in sorted(by_id) if i not in chosen][: count - len(chosen)]
        response = endpoint.allocate(chosen)
        assignment = Assignment(
            resource=resource,
            ids_by_numa=ids_by_numa(by_id[i] for i in chosen),
            allocation=ContainerAllocation.from_proto(response),
        )
        self._manager.record_assignment(pod.uid, container, assignment)
        log.info(
            "devices allocated",
            extra={
                "pod": pod.key,
                "container": container,
                "resource": resource,
                "devices": ",".join(chosen),
            },
        )


def describe_pod(pod: Pod, manager: DeviceManager) -> dict[str, Any]:
    """A pod with its assigned devices, as the control interface reports it."""
    assignments = manager.assignments(pod.uid)
    containers = []
    for container in pod.containers:
        devices: dict[str, Any] = {}
        for resource, assignment in sorted(assignments.get(container.name, {}).items()):
            devices[resource] = {
                "device_ids": sorted(assignment.device_ids),
                "numa": {str(n): list(ids) for n, ids in sorted(assignment.ids_by_numa.items())},
                "envs": dict(sorted(assignment.allocation.envs.items())),
            }
        containers.append({**container.to_json(), "devices": devices})
    return {"uid": pod.uid, "namespace": pod.namespace, "name": pod.name, "containers": containers}
