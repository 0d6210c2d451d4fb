"""The simulated kubelet against the simulated API server: its Node, the Node's status as the
kubelet keeps it, and a Pod object for every pod it runs, under the same uid."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devicedeck.kubelet.checkpoint import read_checkpoint
from devicedeck.sim.apiserver import SimApiServer
from devicedeck.sim.apiserver.patches import MERGE_PATCH
from devicedeck.sim.apiserver.resources import EVENTS, NODES, PODS
from devicedeck.sim.kubeclient import KubeClient
from devicedeck.sim.kubelet import AdmissionError, ContainerSpec, SimKubelet

from .helpers import RecordingPlugin, wait_until

GPU = "example.com/gpu"
DONGLE = "example.com/dongle"
NODE = "node-a"


@pytest.fixture
def api() -> Iterator[SimApiServer]:
    server = SimApiServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def joined(
    api: SimApiServer, start_kubelet: Callable[..., SimKubelet]
) -> Callable[..., SimKubelet]:
    def start(**options: Any) -> SimKubelet:
        client = KubeClient(api.url, api.store.admin_token)
        return start_kubelet(kube_client=client, node_name=NODE, **options)

    return start


def node(api: SimApiServer) -> dict[str, Any]:
    found = api.store.find("nodes", NODE)
    return found or {}


def resources(api: SimApiServer, section: str) -> dict[str, str]:
    values: dict[str, str] = (node(api).get("status") or {}).get(section) or {}
    return {k: v for k, v in values.items() if "/" in k}


def pods(api: SimApiServer) -> dict[str, dict[str, Any]]:
    items, _ = api.store.list(PODS, lambda _obj: True)
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in items}


def test_the_node_registers_and_its_status_follows_device_health(
    api: SimApiServer,
    joined: Callable[..., SimKubelet],
    start_plugin: Callable[..., RecordingPlugin],
) -> None:
    joined()
    plugin = start_plugin(GPU, 4)
    wait_until(lambda: resources(api, "capacity") == {GPU: "4"})
    assert node(api)["metadata"]["labels"]["kubernetes.io/hostname"] == NODE
    assert resources(api, "allocatable") == {GPU: "4"}
    ready = next(c for c in node(api)["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"

    # An unhealthy device lowers allocatable, not capacity.
    plugin.set_health("d1", "Unhealthy")
    wait_until(lambda: resources(api, "allocatable") == {GPU: "3"})
    assert resources(api, "capacity") == {GPU: "4"}
    plugin.set_health("d1", "Healthy")
    wait_until(lambda: resources(api, "allocatable") == {GPU: "4"})


def test_a_resource_whose_plugin_is_gone_drops_to_zero_after_the_grace_period(
    api: SimApiServer,
    joined: Callable[..., SimKubelet],
    start_plugin: Callable[..., RecordingPlugin],
) -> None:
    joined(grace_seconds=0.5)
    plugin = start_plugin(GPU, 2)
    wait_until(lambda: resources(api, "capacity") == {GPU: "2"})
    plugin.stop(grace=0)
    wait_until(lambda: resources(api, "capacity") == {GPU: "0"})
    assert resources(api, "allocatable") == {GPU: "0"}


def test_hand_advertised_resources_are_kept_and_copied_into_allocatable(
    api: SimApiServer,
    joined: Callable[..., SimKubelet],
    start_plugin: Callable[..., RecordingPlugin],
) -> None:
    joined(status_update_seconds=0.5)
    start_plugin(GPU, 2)
    wait_until(lambda: resources(api, "capacity") == {GPU: "2"})
    # The documented procedure: a JSON Patch of the node's status.
    api.store.update(
        NODES,
        None,
        NODE,
        [{"op": "add", "path": "/status/capacity/example.com~1dongle", "value": "4"}],
        subresource="status",
        content_type="application/json-patch+json",
    )
    wait_until(lambda: resources(api, "allocatable").get(DONGLE) == "4")
    assert resources(api, "capacity") == {GPU: "2", DONGLE: "4"}
    # Removed from capacity: allocatable follows on the next update.
    api.store.update(
        NODES,
        None,
        NODE,
        [{"op": "remove", "path": "/status/capacity/example.com~1dongle"}],
        subresource="status",
        content_type="application/json-patch+json",
    )
    wait_until(lambda: DONGLE not in resources(api, "allocatable"))
    assert resources(api, "capacity") == {GPU: "2"}


def test_pods_have_pod_objects_under_the_kubelets_uid(
    api: SimApiServer,
    joined: Callable[..., SimKubelet],
    start_plugin: Callable[..., RecordingPlugin],
) -> None:
    kubelet = joined()
    start_plugin(GPU, 2)
    wait_until(lambda: kubelet.manager.allocatable() == {GPU: 2})

    pod = kubelet.create_pod("ml", "train", [ContainerSpec("main", {GPU: 2})])
    obj = pods(api)["ml/train"]
    assert obj["metadata"]["uid"] == pod.uid
    assert obj["spec"]["nodeName"] == NODE
    assert obj["spec"]["containers"][0]["resources"]["requests"] == {GPU: "2"}
    assert obj["status"]["phase"] == "Running"
    checkpoint = read_checkpoint(kubelet.paths.checkpoint)
    assert {e.pod_uid for e in checkpoint.entries} == {pod.uid}

    # A refused pod leaves no Pod object behind.
    with pytest.raises(AdmissionError):
        kubelet.create_pod("ml", "greedy", [ContainerSpec("main", {GPU: 1})])
    assert set(pods(api)) == {"ml/train"}

    kubelet.delete_pod("ml", "train")
    assert pods(api) == {}


def test_pod_objects_of_pods_that_went_while_it_was_down_are_deleted(
    api: SimApiServer, joined: Callable[..., SimKubelet]
) -> None:
    kubelet = joined(status_update_seconds=0.5)
    kubelet.create_pod("ml", "kept", [ContainerSpec("main", {})])
    api.store.put(
        "pods",
        {
            "metadata": {
                "namespace": "ml",
                "name": "gone",
                "labels": {"devicedeck.dev/simulated": "true"},
            },
            "spec": {"nodeName": NODE, "containers": [{"name": "main"}]},
        },
    )
    api.store.put(
        "pods",
        {
            "metadata": {"namespace": "ml", "name": "someone-elses"},
            "spec": {"nodeName": NODE, "containers": [{"name": "main"}]},
        },
    )
    wait_until(lambda: "ml/gone" not in pods(api))
    assert set(pods(api)) == {"ml/kept", "ml/someone-elses"}
    assert pods(api)["ml/kept"]["status"]["phase"] == "Running"


def events(api: SimApiServer) -> list[tuple[str, str, str]]:
    items, _ = api.store.list(EVENTS, lambda _obj: True)
    return [(e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"]) for e in items]


def test_the_node_has_a_lease_conditions_and_system_info_as_a_kubelet_posts_them(
    api: SimApiServer, joined: Callable[..., SimKubelet]
) -> None:
    joined()
    wait_until(lambda: api.store.find("leases", f"kube-node-lease/{NODE}") is not None)
    lease = api.store.find("leases", f"kube-node-lease/{NODE}")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == NODE
    assert lease["metadata"]["ownerReferences"][0]["uid"] == node(api)["metadata"]["uid"]
    status = node(api)["status"]
    assert [c["type"] for c in status["conditions"]] == [
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "Ready",
    ]
    assert {c["status"] for c in status["conditions"][:3]} == {"False"}
    assert status["nodeInfo"]["kubeletVersion"].startswith("v1.")
    assert status["nodeInfo"]["osImage"] and status["nodeInfo"]["kernelVersion"]
    assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]
    assert ("Node", NODE, "Starting") in events(api)
    assert ("Node", NODE, "NodeReady") in events(api)


def test_a_cordon_is_reported_as_an_event_and_pods_as_they_start(
    api: SimApiServer, joined: Callable[..., SimKubelet]
) -> None:
    kubelet = joined()
    wait_until(lambda: node(api) != {})
    assert kubelet.cluster is not None
    kubelet.cluster.sync(force=True)
    api.store.update(NODES, None, NODE, {"spec": {"unschedulable": True}}, content_type=MERGE_PATCH)
    kubelet.cluster.sync(force=True)
    assert ("Node", NODE, "NodeNotSchedulable") in events(api)
    api.store.update(
        NODES, None, NODE, {"spec": {"unschedulable": False}}, content_type=MERGE_PATCH
    )
    kubelet.cluster.sync(force=True)
    assert ("Node", NODE, "NodeSchedulable") in events(api)

    kubelet.create_pod("ml", "train", [ContainerSpec("main", {})])
    assert ("Pod", "train", "Started") in events(api)
    with pytest.raises(AdmissionError):
        kubelet.create_pod("ml", "greedy", [ContainerSpec("main", {GPU: 1})])
    assert ("Pod", "greedy", "UnexpectedAdmissionError") in events(api)
