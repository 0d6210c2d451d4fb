"""Pods (all namespaces, one namespace, by node), and the DRA collections."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s
from kubernetes import watch

from devicedeck.sim.apiserver import SimApiServer

from .conftest import http, pod_object


def test_pods_create_list_get_delete(api: SimApiServer, core: k8s.CoreV1Api) -> None:
    created = core.create_namespaced_pod("ml", pod_object("ml", "train", node="node-a"))
    assert created.metadata.uid and created.metadata.namespace == "ml"
    assert created.status.phase == "Pending"
    core.create_namespaced_pod("web", pod_object("web", "serve", node="node-b"))
    core.create_namespaced_pod("ml", pod_object("ml", "queued"))

    names = [
        (p.metadata.namespace, p.metadata.name) for p in core.list_pod_for_all_namespaces().items
    ]
    assert names == [("ml", "queued"), ("ml", "train"), ("web", "serve")]
    assert [p.metadata.name for p in core.list_namespaced_pod("ml").items] == ["queued", "train"]
    on_a = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-a")
    assert [p.metadata.name for p in on_a.items] == ["train"]
    unscheduled = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=")
    assert [p.metadata.name for p in unscheduled.items] == ["queued"]
    pod = core.read_namespaced_pod("train", "ml")
    assert pod.spec.containers[0].resources.requests == {"example.com/gpu": "1"}

    # The kubelet reports the phase through the status subresource.
    running = core.patch_namespaced_pod_status("train", "ml", {"status": {"phase": "Running"}})
    assert running.status.phase == "Running"

    with pytest.raises(k8s.ApiException) as again:
        core.create_namespaced_pod("ml", pod_object("ml", "train"))
    assert again.value.status == 409
    status, body = http(api, "POST", "/api/v1/namespaces/web/pods", pod_object("ml", "x"))
    assert (status, body["reason"]) == (400, "BadRequest")

    core.delete_namespaced_pod("train", "ml")
    with pytest.raises(k8s.ApiException) as gone:
        core.read_namespaced_pod("train", "ml")
    assert gone.value.status == 404
    with pytest.raises(k8s.ApiException) as twice:
        core.delete_namespaced_pod("train", "ml")
    assert twice.value.status == 404
    status, body = http(
        api,
        "DELETE",
        "/api/v1/namespaces/web/pods/serve",
        {"preconditions": {"uid": "not-its-uid"}},
    )
    assert (status, body["reason"]) == (409, "Conflict")
    assert [p.metadata.name for p in core.list_namespaced_pod("web").items] == ["serve"]


def test_resource_slices_and_claims_are_empty_until_created(
    api: SimApiServer, api_client: k8s.ApiClient
) -> None:
    custom = k8s.CustomObjectsApi(api_client)
    group, version = "resource.k8s.io", "v1"
    assert custom.list_cluster_custom_object(group, version, "resourceslices")["items"] == []
    assert custom.list_cluster_custom_object(group, version, "resourceclaims")["items"] == []
    custom.create_cluster_custom_object(
        group,
        version,
        "resourceslices",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "node-a-gpu"},
            "spec": {
                "driver": "gpu.example.com",
                "nodeName": "node-a",
                "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}],
            },
        },
    )
    custom.create_namespaced_custom_object(
        group,
        version,
        "ml",
        "resourceclaims",
        {"metadata": {"name": "gpu"}, "spec": {"devices": {"requests": [{"name": "gpu"}]}}},
    )
    slices = custom.list_cluster_custom_object(group, version, "resourceslices")["items"]
    assert [s["spec"]["devices"][0]["name"] for s in slices] == ["gpu-0"]
    claims = custom.list_cluster_custom_object(group, version, "resourceclaims")["items"]
    assert [(c["metadata"]["namespace"], c["kind"]) for c in claims] == [("ml", "ResourceClaim")]
    status, body = http(
        api, "GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-b"
    )
    assert (status, body["items"]) == (200, [])


def test_resource_slices_are_watched(api: SimApiServer, api_client: k8s.ApiClient) -> None:
    custom = k8s.CustomObjectsApi(api_client)
    group, version = "resource.k8s.io", "v1"
    start = custom.list_cluster_custom_object(group, version, "resourceslices")["metadata"][
        "resourceVersion"
    ]
    body = {
        "metadata": {"name": "node-a-gpu"},
        "spec": {"driver": "gpu.example.com", "nodeName": "node-a", "devices": []},
    }
    custom.create_cluster_custom_object(group, version, "resourceslices", body)
    custom.delete_cluster_custom_object(group, version, "resourceslices", "node-a-gpu")
    events = []
    stream = watch.Watch()
    for event in stream.stream(
        custom.list_cluster_custom_object,
        group,
        version,
        "resourceslices",
        resource_version=start,
        timeout_seconds=20,
    ):
        events.append((event["type"], event["object"]["metadata"]["name"]))
        if len(events) == 2:
            stream.stop()
    assert events == [("ADDED", "node-a-gpu"), ("DELETED", "node-a-gpu")]
