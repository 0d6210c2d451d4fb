"""Strategic merge patch as the kubelet and kubectl send it, on the objects this server keeps:
lists with a merge key merge item by item, and the directives change lists as they say."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from devicedeck.sim.apiserver import SimApiServer

from .conftest import http, node_object, pod_object

SMP = "application/strategic-merge-patch+json"


def patch_node(api: SimApiServer, patch: dict[str, Any], subresource: str = "") -> dict[str, Any]:
    status, body = http(api, "PATCH", f"/api/v1/nodes/node-a{subresource}", patch, SMP)
    assert status == 200, body
    return body


def test_conditions_merge_by_type_and_delete_directives_remove_items(
    api: SimApiServer, core: k8s.CoreV1Api
) -> None:
    node = node_object("node-a")
    node["status"]["conditions"].append({"type": "DiskPressure", "status": "False"})
    core.create_node(node)
    body = patch_node(
        api,
        {"status": {"conditions": [{"type": "DiskPressure", "$patch": "delete"}]}},
        "/status",
    )
    assert [c["type"] for c in body["status"]["conditions"]] == ["Ready"]
    body = patch_node(
        api, {"status": {"conditions": [{"type": "Ready", "message": "fine"}]}}, "/status"
    )
    assert body["status"]["conditions"] == [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fine"}
    ]


def test_labels_taints_and_finalizers(api: SimApiServer, core: k8s.CoreV1Api) -> None:
    core.create_node(node_object("node-a"))
    body = patch_node(
        api,
        {
            "metadata": {"labels": {"zone": "a"}, "finalizers": ["example.com/keep"]},
            "spec": {"taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]},
        },
    )
    body = patch_node(
        api,
        {
            "metadata": {"labels": {"kubernetes.io/hostname": None}, "finalizers": ["a.b/c"]},
            "spec": {"taints": [{"key": "gpu", "effect": "NoExecute"}]},
        },
    )
    assert body["metadata"]["labels"] == {"zone": "a"}
    assert body["metadata"]["finalizers"] == ["example.com/keep", "a.b/c"]
    # Taints have no merge key in the API types: the patch's list replaces the old one.
    assert body["spec"]["taints"] == [{"key": "gpu", "effect": "NoExecute"}]
    body = patch_node(api, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.b/c"]}})
    assert body["metadata"]["finalizers"] == ["example.com/keep"]


def test_containers_merge_by_name(api: SimApiServer, core: k8s.CoreV1Api) -> None:
    pod = pod_object("ml", "train", "node-a")
    pod["spec"]["containers"].append({"name": "sidecar", "image": "log:1"})
    core.create_namespaced_pod("ml", pod)
    status, body = http(
        api,
        "PATCH",
        "/api/v1/namespaces/ml/pods/train",
        {"spec": {"containers": [{"name": "sidecar", "image": "log:2"}]}},
        SMP,
    )
    assert status == 200, body
    assert [(c["name"], c["image"]) for c in body["spec"]["containers"]] == [
        ("main", "trainer:1"),
        ("sidecar", "log:2"),
    ]
    # A list item without its merge key cannot be placed: 422, nothing changed.
    status, body = http(
        api,
        "PATCH",
        "/api/v1/namespaces/ml/pods/train",
        {"spec": {"containers": [{"image": "x"}]}},
        SMP,
    )
    assert (status, body["reason"]) == (422, "Invalid")
    assert len(core.read_namespaced_pod("train", "ml").spec.containers) == 2
