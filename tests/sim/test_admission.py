"""Pod admission: which devices a container gets, and when a pod is refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from devicedeck.kubelet.deviceplugin import PluginDevice
from devicedeck.sim.kubelet import AdmissionError, ContainerSpec, SimKubelet

from .helpers import RecordingPlugin, wait_until

GPU = "example.com/gpu"
DONGLE = "example.com/dongle"


def held(kubelet: SimKubelet, namespace: str, name: str) -> dict[str, dict[str, set[str]]]:
    pod = kubelet.pods.find(namespace, name)
    assert pod is not None
    return {
        container: {resource: a.device_ids for resource, a in by_resource.items()}
        for container, by_resource in kubelet.manager.assignments(pod.uid).items()
    }


def numa_plugin_devices() -> list[PluginDevice]:
    # Sorted by id the devices alternate NUMA nodes, so "the first two" would span both.
    return [PluginDevice(f"g{i}", numa_nodes=(i % 2,)) for i in range(4)]


def test_devices_come_from_one_numa_node_when_one_has_enough(
    start_kubelet: Callable[..., SimKubelet], start_plugin: Callable[..., RecordingPlugin]
) -> None:
    kubelet = start_kubelet(topology_policy="best-effort")
    start_plugin(GPU, numa_plugin_devices(), preferred_allocation_available=False)
    wait_until(lambda: kubelet.manager.allocatable() == {GPU: 4})

    kubelet.create_pod("ml", "a", [ContainerSpec("main", {GPU: 2})])
    kubelet.create_pod("ml", "b", [ContainerSpec("main", {GPU: 2})])

    assert held(kubelet, "ml", "a") == {"main": {GPU: {"g0", "g2"}}}
    assert held(kubelet, "ml", "b") == {"main": {GPU: {"g1", "g3"}}}
    pod = kubelet.pods.find("ml", "a")
    assert pod is not None
    assert kubelet.manager.assignments(pod.uid)["main"][GPU].ids_by_numa == {0: ("g0", "g2")}


def test_request_spans_numa_nodes_when_no_single_node_has_room(
    start_kubelet: Callable[..., SimKubelet], start_plugin: Callable[..., RecordingPlugin]
) -> None:
    kubelet = start_kubelet(topology_policy="best-effort")
    start_plugin(GPU, numa_plugin_devices(), preferred_allocation_available=False)
    wait_until(lambda: kubelet.manager.allocatable() == {GPU: 4})

    kubelet.create_pod("ml", "wide", [ContainerSpec("main", {GPU: 3})])

    pod = kubelet.pods.find("ml", "wide")
    assert pod is not None
    assert kubelet.manager.assignments(pod.uid)["main"][GPU].ids_by_numa == {
        0: ("g0", "g2"),
        1: ("g1",),
    }


def test_preferred_allocation_is_asked_and_used(
    start_kubelet: Callable[..., SimKubelet], start_plugin: Callable[..., RecordingPlugin]
) -> None:
    kubelet = start_kubelet()
    plugin = start_plugin(DONGLE, 4, prefer=["d3", "d1"])
    wait_until(lambda: kubelet.manager.allocatable() == {DONGLE: 4})

    kubelet.create_pod("default", "p", [ContainerSpec("main", {DONGLE: 2})])

    assert plugin.preferred_calls == [(["d0", "d1", "d2", "d3"], [], 2)]
    assert held(kubelet, "default", "p") == {"main": {DONGLE: {"d1", "d3"}}}
    # One Allocate per container, with exactly the chosen devices.
    assert [sorted(c) for c in plugin.allocate_calls] == [["d1", "d3"]]


def test_preferred_allocation_not_asked_when_plugin_does_not_offer_it(
    start_kubelet: Callable[..., SimKubelet], start_plugin: Callable[..., RecordingPlugin]
) -> None:
    kubelet = start_kubelet()
    plugin = start_plugin(DONGLE, 2, preferred_allocation_available=False)
    wait_until(lambda: kubelet.manager.allocatable() == {DONGLE: 2})

    kubelet.create_pod("default", "p", [ContainerSpec("main", {DONGLE: 1})])

    assert plugin.preferred_calls == []
    assert plugin.allocate_calls == [["d0"]]


def test_unhealthy_devices_are_never_allocated(
    start_kubelet: Callable[..., SimKubelet], start_plugin: Callable[..., RecordingPlugin]
) -> None:
    kubelet = start_kubelet()
    plugin = start_plugin(DONGLE, 4)
    plugin.set_health("d0", "Unhealthy")
    plugin.set_health("d2", "Unhealthy")
    wait_until(lambda: kubelet.manager.allocatable() == {DONGLE: 2})

    kubelet.create_pod("default", "a", [ContainerSpec("main", {DONGLE: 2})])
    assert held(kubelet, "default", "a") == {"main": {DONGLE: {"d1", "d3"}}}

    with pytest.raises(AdmissionError) as refused:
        kubelet.create_pod("default", "b", [ContainerSpec("main", {DONGLE: 1})])
    assert "requested 1, free 0 (total 4, unhealthy 2)" in str(refused.value)


def test_admission_fails_when_not_enough_devices_and_keeps_nothing(
    start_kubelet: Callable[..., SimKubelet], start_plugin: Callable[..., RecordingPlugin]
) -> None:
    kubelet = start_kubelet()
    start_plugin(DONGLE, 2)
    wait_until(lambda: kubelet.manager.allocatable() == {DONGLE: 2})

    with pytest.raises(AdmissionError) as refused:
        kubelet.create_pod(
            "default",
            "greedy",
            [ContainerSpec("first", {DONGLE: 1}), ContainerSpec("second", {DONGLE: 2})],
        )

    assert str(refused.value).startswith("pod default/greedy rejected: container second:")
    assert "not enough free healthy example.com/dongle devices" in str(refused.value)
    assert kubelet.pods.find("default", "greedy") is None
    # The first container's device went back: both are free for the next pod.
    kubelet.create_pod("default", "fits", [ContainerSpec("main", {DONGLE: 2})])


def test_deleted_pod_devices_are_reused(
    start_kubelet: Callable[..., SimKubelet], start_plugin: Callable[..., RecordingPlugin]
) -> None:
    kubelet = start_kubelet()
    start_plugin(DONGLE, 1)
    wait_until(lambda: kubelet.manager.allocatable() == {DONGLE: 1})
    kubelet.create_pod("default", "a", [ContainerSpec("main", {DONGLE: 1})])

    kubelet.delete_pod("default", "a")
    kubelet.create_pod("default", "b", [ContainerSpec("main", {DONGLE: 1})])

    assert held(kubelet, "default", "b") == {"main": {DONGLE: {"d0"}}}


def test_pre_start_container_called_when_required(
    start_kubelet: Callable[..., SimKubelet], start_plugin: Callable[..., RecordingPlugin]
) -> None:
    kubelet = start_kubelet()
    plugin = start_plugin(DONGLE, 3, pre_start_required=True)
    wait_until(lambda: kubelet.manager.allocatable() == {DONGLE: 3})

    kubelet.create_pod(
        "default", "p", [ContainerSpec("a", {DONGLE: 1}), ContainerSpec("b", {DONGLE: 2})]
    )

    assert plugin.allocate_calls == [["d0"], ["d1", "d2"]]
    assert plugin.pre_start_calls == [["d0"], ["d1", "d2"]]


@pytest.mark.parametrize(
    ("namespace", "name", "containers", "reason"),
    [
        ("Bad_NS", "p", [ContainerSpec("main")], "namespace"),
        ("default", "p", [], "at least one container"),
        ("default", "p", [ContainerSpec("c"), ContainerSpec("c")], "unique"),
        ("default", "p", [ContainerSpec("main", {"example.com/none": 1})], "not provided"),
    ],
)
def test_invalid_pods_are_refused(
    start_kubelet: Callable[..., SimKubelet],
    namespace: str,
    name: str,
    containers: list[ContainerSpec],
    reason: str,
) -> None:
    kubelet = start_kubelet()
    with pytest.raises(AdmissionError, match=reason):
        kubelet.create_pod(namespace, name, containers)
    assert kubelet.pods.active() == []


def test_duplicate_pod_is_refused(start_kubelet: Callable[..., SimKubelet]) -> None:
    kubelet = start_kubelet()
    kubelet.create_pod("default", "p", [ContainerSpec("main")])
    with pytest.raises(AdmissionError, match="already exists"):
        kubelet.create_pod("default", "p", [ContainerSpec("main")])
