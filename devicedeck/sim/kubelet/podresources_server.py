"""The PodResources v1 service the kubelet serves on pod-resources/kubelet.sock.

Shapes follow the kubelet: List and Get report one ContainerDevices per (device, NUMA node)
with exactly one device id, devices without topology once and without topology; List walks
the active pods only, including pods holding no devices; GetAllocatableResources reports
the healthy devices, split the same way. All calls share one token bucket (100 per second,
burst 10, the kubelet's defaults); beyond it a call gets RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import grpc

from devicedeck.kubelet.proto import podresources_pb2 as pr
from devicedeck.kubelet.proto import podresources_pb2_grpc as pr_grpc
from devicedeck.sim.kubelet.devices import NO_TOPOLOGY, Assignment, DeviceInfo, DeviceManager
from devicedeck.sim.kubelet.pods import Pod

log = logging.getLogger(__name__)

# The kubelet's podresources rate limit (DefaultQPS, DefaultBurstTokens).
DEFAULT_QPS = 100.0
DEFAULT_BURST = 10


class TokenBucket:
    def __init__(
        self,
        rate: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
            self._last = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False


class RateLimitInterceptor(grpc.ServerInterceptor):
    """Refuses any call once the shared bucket is empty, before the handler runs."""

    def __init__(self, bucket: TokenBucket) -> None:
        self._bucket = bucket

        def refuse(request: Any, context: grpc.ServicerContext) -> None:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")

        # Every PodResources rpc is unary-unary, so one refusal handler fits them all.
        self._refusal = grpc.unary_unary_rpc_method_handler(refuse)

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        if self._bucket.allow():
            return continuation(details)
        log.debug("podresources call rate limited", extra={"method": details.method})
        return self._refusal


def _topology(numa: int) -> pr.TopologyInfo | None:
    return None if numa == NO_TOPOLOGY else pr.TopologyInfo(nodes=[pr.NUMANode(ID=numa)])


def assignment_devices(assignment: Assignment) -> list[pr.ContainerDevices]:
    return [
        pr.ContainerDevices(
            resource_name=assignment.resource, device_ids=[device_id], topology=_topology(numa)
        )
        for numa, ids in sorted(assignment.ids_by_numa.items())
        for device_id in ids
    ]


def allocatable_devices(resource: str, devices: Iterable[DeviceInfo]) -> list[pr.ContainerDevices]:
    return [
        pr.ContainerDevices(resource_name=resource, device_ids=[d.id], topology=_topology(numa))
        for d in devices
        for numa in (d.numa_nodes or (NO_TOPOLOGY,))
    ]


class PodResourcesService(pr_grpc.PodResourcesListerServicer):
    def __init__(
        self,
        manager: DeviceManager,
        active_pods: Callable[[], list[Pod]],
        active_uids: Callable[[], set[str]],
    ) -> None:
        self._manager = manager
        self._active_pods = active_pods
        self._active_uids = active_uids

    def _pod_resources(self, pod: Pod) -> pr.PodResources:
        assignments = self._manager.assignments(pod.uid)
        containers = []
        for container in pod.containers:
            by_resource = assignments.get(container.name, {})
            devices = [
                entry
                for _, assignment in sorted(by_resource.items())
                for entry in assignment_devices(assignment)
            ]
            containers.append(pr.ContainerResources(name=container.name, devices=devices))
        return pr.PodResources(name=pod.name, namespace=pod.namespace, containers=containers)

    def List(
        self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.ListPodResourcesResponse:
        # Like the kubelet, List garbage-collects devices of gone pods (without a
        # checkpoint write).
        self._manager.remove_inactive_pods(self._active_uids())
        return pr.ListPodResourcesResponse(
            pod_resources=[self._pod_resources(p) for p in self._active_pods()]
        )

    def GetAllocatableResources(
        self, request: pr.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pr.AllocatableResourcesResponse:
        devices = [
            entry
            for resource, healthy in self._manager.healthy_devices().items()
            for entry in allocatable_devices(resource, healthy)
        ]
        return pr.AllocatableResourcesResponse(devices=devices)

    def Get(
        self, request: pr.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.GetPodResourcesResponse:
        for pod in self._active_pods():
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return pr.GetPodResourcesResponse(pod_resources=self._pod_resources(pod))
        context.abort(
            grpc.StatusCode.NOT_FOUND,
            f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
        )
        raise AssertionError("unreachable: abort raises")
