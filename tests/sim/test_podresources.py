"""The PodResources v1 service: List, GetAllocatableResources, Get and the rate limit."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from devicedeck.kubelet.deviceplugin import PluginDevice
from devicedeck.kubelet.paths import pod_resources_socket, unix_target
from devicedeck.kubelet.proto import podresources_pb2 as pr
from devicedeck.sim.kubelet import ContainerSpec, SimKubelet
from devicedeck.sim.kubelet.podresources_server import TokenBucket

from .helpers import (
    RecordingPlugin,
    allocatable,
    device_entries,
    list_pods,
    pod_resources_stub,
    wait_until,
)

GPU = "example.com/gpu"
DONGLE = "example.com/dongle"


@pytest.fixture
def node(
    start_kubelet: Callable[..., SimKubelet], start_plugin: Callable[..., RecordingPlugin]
) -> SimKubelet:
    kubelet = start_kubelet()
    gpus = [
        PluginDevice("g0", numa_nodes=(0,)),
        PluginDevice("g1", numa_nodes=(0, 1)),  # one device on two NUMA nodes
        PluginDevice("g2", numa_nodes=(1,)),
    ]
    start_plugin(GPU, gpus, preferred_allocation_available=False)
    start_plugin(DONGLE, 2)
    wait_until(lambda: kubelet.manager.allocatable() == {DONGLE: 2, GPU: 3})
    kubelet.create_pod("ml", "train", [ContainerSpec("main", {GPU: 2, DONGLE: 1})])
    kubelet.create_pod("ml", "idle", [ContainerSpec("app"), ContainerSpec("sidecar")])
    return kubelet


def test_list_has_one_entry_per_device_and_numa_node(root: Path, node: SimKubelet) -> None:
    pods = list_pods(root).pod_resources

    assert [(p.namespace, p.name) for p in pods] == [("ml", "idle"), ("ml", "train")]
    idle, train = pods
    assert [(c.name, list(c.devices)) for c in idle.containers] == [("app", []), ("sidecar", [])]
    (main,) = train.containers
    assert main.name == "main"
    assert len(main.devices) == 4
    assert device_entries(main.devices) == {
        (GPU, "g0", 0),
        (GPU, "g1", 0),
        (GPU, "g1", 1),
        (DONGLE, "d0", None),
    }


def test_deleted_pod_leaves_list(root: Path, node: SimKubelet) -> None:
    node.delete_pod("ml", "idle")
    assert [p.name for p in list_pods(root).pod_resources] == ["train"]


def test_get_allocatable_lists_healthy_devices_per_numa_node(root: Path, node: SimKubelet) -> None:
    assert device_entries(allocatable(root).devices) == {
        (GPU, "g0", 0),
        (GPU, "g1", 0),
        (GPU, "g1", 1),
        (GPU, "g2", 1),
        (DONGLE, "d0", None),
        (DONGLE, "d1", None),
    }


def test_get_returns_one_pod_and_not_found_for_unknown(root: Path, node: SimKubelet) -> None:
    channel, stub = pod_resources_stub(root)
    with channel:
        found = stub.Get(pr.GetPodResourcesRequest(pod_name="train", pod_namespace="ml"), timeout=5)
        with pytest.raises(grpc.RpcError) as missing:
            stub.Get(pr.GetPodResourcesRequest(pod_name="train", pod_namespace="other"), timeout=5)

    assert found.pod_resources.name == "train"
    assert found.pod_resources.namespace == "ml"
    assert device_entries(found.pod_resources.containers[0].devices) == {
        (GPU, "g0", 0),
        (GPU, "g1", 0),
        (GPU, "g1", 1),
        (DONGLE, "d0", None),
    }
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


def test_method_paths_on_the_wire(root: Path, node: SimKubelet) -> None:
    with grpc.insecure_channel(unix_target(pod_resources_socket(root))) as channel:
        call = channel.unary_unary(
            "/v1.PodResourcesLister/List",
            request_serializer=pr.ListPodResourcesRequest.SerializeToString,
            response_deserializer=pr.ListPodResourcesResponse.FromString,
        )
        assert len(call(pr.ListPodResourcesRequest(), timeout=5).pod_resources) == 2


def test_rate_limit_answers_resource_exhausted(
    root: Path, start_kubelet: Callable[..., SimKubelet]
) -> None:
    start_kubelet()
    channel, stub = pod_resources_stub(root)
    codes: list[grpc.StatusCode] = []
    with channel:
        started = time.monotonic()
        futures = [stub.List.future(pr.ListPodResourcesRequest(), timeout=10) for _ in range(60)]
        for future in futures:
            codes.append(future.code())
        elapsed = time.monotonic() - started

    allowed = codes.count(grpc.StatusCode.OK)
    assert allowed + codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == len(codes)
    assert allowed >= 10
    assert allowed <= 10 + int(elapsed * 100) + 1
    assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes


def test_token_bucket_allows_a_burst_of_ten_then_a_hundred_per_second() -> None:
    now = [100.0]
    bucket = TokenBucket(clock=lambda: now[0])
    assert [bucket.allow() for _ in range(11)] == [True] * 10 + [False]
    now[0] += 0.0625  # 6.25 tokens back (a binary fraction, so the sum is exact)
    assert [bucket.allow() for _ in range(7)] == [True] * 6 + [False]
    now[0] += 10  # never more than the burst
    assert sum(bucket.allow() for _ in range(20)) == 10
