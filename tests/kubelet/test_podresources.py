"""The PodResources client against a PodResourcesLister served on a real unix socket."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from devicedeck.kubelet.paths import KubeletPaths, unix_target
from devicedeck.kubelet.podresources import (
    MAX_RECEIVE_BYTES,
    PodResourcesClient,
    PodResourcesError,
    allocatable_response_to_json,
    get_response_to_json,
    list_response_to_json,
    to_json,
)
from devicedeck.kubelet.proto import podresources_pb2, podresources_pb2_grpc


def device(resource: str, device_id: str, numa: int) -> podresources_pb2.ContainerDevices:
    return podresources_pb2.ContainerDevices(
        resource_name=resource,
        device_ids=[device_id],
        topology=podresources_pb2.TopologyInfo(nodes=[podresources_pb2.NUMANode(ID=numa)]),
    )


TRAINER = podresources_pb2.PodResources(
    name="trainer",
    namespace="ml",
    containers=[
        podresources_pb2.ContainerResources(
            name="main",
            devices=[device("nvidia.com/gpu", "GPU-a", 1), device("nvidia.com/gpu", "GPU-a", 0)],
            cpu_ids=[2, 3],
            dynamic_resources=[
                podresources_pb2.DynamicResource(
                    claim_name="gpu-claim",
                    claim_namespace="ml",
                    claim_resources=[
                        podresources_pb2.ClaimResource(
                            driver_name="gpu.example.com",
                            pool_name="node-a",
                            device_name="gpu-0",
                            share_id="s1",
                        )
                    ],
                )
            ],
        )
    ],
)


class FakeLister(podresources_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, pods: list[podresources_pb2.PodResources]) -> None:
        self.pods = pods

    def List(
        self, request: podresources_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> podresources_pb2.ListPodResourcesResponse:
        return podresources_pb2.ListPodResourcesResponse(pod_resources=self.pods)

    def GetAllocatableResources(
        self, request: podresources_pb2.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> podresources_pb2.AllocatableResourcesResponse:
        return podresources_pb2.AllocatableResourcesResponse(
            devices=[device("nvidia.com/gpu", "GPU-a", 0)], cpu_ids=[0, 1]
        )

    def Get(
        self, request: podresources_pb2.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> podresources_pb2.GetPodResourcesResponse:
        for pod in self.pods:
            if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                return podresources_pb2.GetPodResourcesResponse(pod_resources=pod)
        context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_name} not found")
        raise AssertionError("abort returns only by raising")


@pytest.fixture
def lister(kubelet_root: KubeletPaths) -> Iterator[FakeLister]:
    servicer = FakeLister([TRAINER])
    with ThreadPoolExecutor(max_workers=2) as executor:
        server = grpc.server(executor)
        podresources_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
        server.add_insecure_port(unix_target(kubelet_root.pod_resources_socket))
        server.start()
        try:
            yield servicer
        finally:
            server.stop(0).wait()


def test_list_allocatable_and_get(kubelet_root: KubeletPaths, lister: FakeLister) -> None:
    with PodResourcesClient(kubelet_root.pod_resources_socket) as client:
        listed = client.list_pod_resources()
        assert [p.name for p in listed.pod_resources] == ["trainer"]
        assert client.get_allocatable_resources().cpu_ids == [0, 1]
        got = client.get_pod_resources("ml", "trainer")
        assert got.pod_resources == TRAINER
        with pytest.raises(PodResourcesError, match="NOT_FOUND") as excinfo:
            client.get_pod_resources("ml", "gone")
        assert excinfo.value.code == grpc.StatusCode.NOT_FOUND


def test_receives_more_than_the_grpc_default_limit(
    kubelet_root: KubeletPaths, lister: FakeLister
) -> None:
    # About 6 MiB: over gRPC's 4 MiB default, under the 16 MiB the kubelet's tools allow.
    many = [
        podresources_pb2.PodResources(name=f"pod-{i}", namespace="x" * 6000) for i in range(1000)
    ]
    lister.pods = many
    with PodResourcesClient(kubelet_root.pod_resources_socket) as client:
        assert len(client.list_pod_resources().pod_resources) == 1000
    assert MAX_RECEIVE_BYTES == 16 * 1024 * 1024


def test_unreachable_socket_fails_after_the_dial_timeout(kubelet_root: KubeletPaths) -> None:
    with (
        PodResourcesClient(kubelet_root.pod_resources_socket, dial_timeout=0.2) as client,
        pytest.raises(PodResourcesError, match="cannot connect") as excinfo,
    ):
        client.list_pod_resources()
    assert excinfo.value.code == grpc.StatusCode.UNAVAILABLE


def test_json_is_what_grpcurl_prints() -> None:
    doc = list_response_to_json(podresources_pb2.ListPodResourcesResponse(pod_resources=[TRAINER]))
    container = doc["podResources"][0]["containers"][0]
    assert container["devices"][0] == {
        "resourceName": "nvidia.com/gpu",
        "deviceIds": ["GPU-a"],
        "topology": {"nodes": [{"ID": "1"}]},
    }
    # NUMA node 0 is the zero value and left out, exactly as grpcurl shows it.
    assert container["devices"][1]["topology"] == {"nodes": [{}]}
    assert container["cpuIds"] == ["2", "3"]
    assert container["dynamicResources"][0]["claimResources"][0] == {
        "driverName": "gpu.example.com",
        "poolName": "node-a",
        "deviceName": "gpu-0",
        "shareId": "s1",
    }
    with_defaults = to_json(
        podresources_pb2.ContainerDevices(
            resource_name="r/x",
            device_ids=["a"],
            topology=podresources_pb2.TopologyInfo(nodes=[podresources_pb2.NUMANode(ID=0)]),
        ),
        include_defaults=True,
    )
    assert with_defaults["topology"] == {"nodes": [{"ID": "0"}]}
    allocatable = allocatable_response_to_json(
        podresources_pb2.AllocatableResourcesResponse(cpu_ids=[4])
    )
    assert allocatable == {"cpuIds": ["4"]}
    assert get_response_to_json(podresources_pb2.GetPodResourcesResponse()) == {}
