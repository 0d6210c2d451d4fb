"""The topology manager policies: none (the default) lets the plugin's preference decide;
best-effort, restricted and single-numa-node align devices on NUMA nodes, and the last two
refuse pods they cannot align."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from devicedeck.kubelet.deviceplugin import PluginDevice
from devicedeck.sim.kubelet import AdmissionError, ContainerSpec, SimKubelet

from .helpers import RecordingPlugin, wait_until

GPU = "example.com/gpu"


def devices() -> list[PluginDevice]:
    # g0 and g2 on NUMA node 0, g1 and g3 on node 1.
    return [PluginDevice(f"g{i}", numa_nodes=(i % 2,)) for i in range(4)]


def held(kubelet: SimKubelet, name: str) -> set[str]:
    pod = kubelet.pods.find("ml", name)
    assert pod is not None
    return kubelet.manager.assignments(pod.uid)["main"][GPU].device_ids


def gpus(count: int) -> list[ContainerSpec]:
    return [ContainerSpec("main", {GPU: count})]


def test_by_default_the_plugins_preference_decides(
    start_kubelet: Callable[..., SimKubelet], start_plugin: Callable[..., RecordingPlugin]
) -> None:
    kubelet = start_kubelet()
    assert kubelet.admitter.topology_policy == "none"
    plugin = start_plugin(GPU, devices(), prefer=["g1"])
    wait_until(lambda: kubelet.manager.allocatable() == {GPU: 4})

    kubelet.create_pod("ml", "a", gpus(1))

    # Every free device was offered, and the plugin's second device is what the pod got.
    assert plugin.preferred_calls == [(["g0", "g1", "g2", "g3"], [], 1)]
    assert held(kubelet, "a") == {"g1"}


def test_best_effort_offers_only_the_aligned_devices(
    start_kubelet: Callable[..., SimKubelet], start_plugin: Callable[..., RecordingPlugin]
) -> None:
    kubelet = start_kubelet(topology_policy="best-effort")
    plugin = start_plugin(GPU, devices(), prefer=["g1"])
    wait_until(lambda: kubelet.manager.allocatable() == {GPU: 4})

    kubelet.create_pod("ml", "a", gpus(2))

    assert plugin.preferred_calls == [(["g0", "g2"], [], 2)]
    assert held(kubelet, "a") == {"g0", "g2"}


@pytest.fixture
def with_policy(
    start_kubelet: Callable[..., SimKubelet], start_plugin: Callable[..., RecordingPlugin]
) -> Callable[[str], SimKubelet]:
    """A kubelet with the policy and the four GPUs of devices(), with no plugin preference."""

    def start(policy: str) -> SimKubelet:
        kubelet = start_kubelet(topology_policy=policy)
        start_plugin(GPU, devices(), preferred_allocation_available=False)
        wait_until(lambda: kubelet.manager.allocatable() == {GPU: 4})
        return kubelet

    return start


def split_free_devices(kubelet: SimKubelet) -> None:
    """Leave one free device on each NUMA node (g2 on node 0, g3 on node 1)."""
    kubelet.create_pod("ml", "a", gpus(1))
    kubelet.create_pod("ml", "b", gpus(1))
    kubelet.create_pod("ml", "c", gpus(1))
    assert (held(kubelet, "a"), held(kubelet, "b"), held(kubelet, "c")) == ({"g0"}, {"g2"}, {"g1"})
    kubelet.delete_pod("ml", "b")


@pytest.mark.parametrize(
    ("policy", "admitted"),
    [("best-effort", True), ("restricted", False), ("single-numa-node", False)],
)
def test_a_request_that_could_fit_one_node_but_must_span_two(
    with_policy: Callable[[str], SimKubelet], policy: str, admitted: bool
) -> None:
    kubelet = with_policy(policy)
    split_free_devices(kubelet)

    if admitted:
        kubelet.create_pod("ml", "wide", gpus(2))
        assert held(kubelet, "wide") == {"g2", "g3"}
    else:
        with pytest.raises(AdmissionError, match="Topology locality"):
            kubelet.create_pod("ml", "wide", gpus(2))
        assert kubelet.pods.find("ml", "wide") is None
        # The refused pod holds nothing: both devices are still free.
        kubelet.create_pod("ml", "one", gpus(1))


@pytest.mark.parametrize(
    ("policy", "admitted"), [("restricted", True), ("single-numa-node", False)]
)
def test_a_request_no_single_node_could_ever_hold(
    with_policy: Callable[[str], SimKubelet], policy: str, admitted: bool
) -> None:
    kubelet = with_policy(policy)

    if admitted:
        kubelet.create_pod("ml", "big", gpus(3))
        assert len(held(kubelet, "big")) == 3
    else:
        with pytest.raises(AdmissionError, match="Topology locality"):
            kubelet.create_pod("ml", "big", gpus(3))


def test_devices_without_topology_are_never_refused(
    start_kubelet: Callable[..., SimKubelet], start_plugin: Callable[..., RecordingPlugin]
) -> None:
    kubelet = start_kubelet(topology_policy="single-numa-node")
    start_plugin(GPU, 4)
    wait_until(lambda: kubelet.manager.allocatable() == {GPU: 4})
    kubelet.create_pod("ml", "a", gpus(4))
    assert len(held(kubelet, "a")) == 4


def test_an_unknown_policy_is_refused(start_kubelet: Callable[..., SimKubelet]) -> None:
    with pytest.raises(ValueError, match="topology manager policy"):
        start_kubelet(topology_policy="tight")
