"""Nodes through the official client and plain HTTP: create, get, list, the three patch types
on the status subresource, and every refusal answered as a Status that changed nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s

from devicedeck.sim.apiserver import SimApiServer

from .conftest import http, node_object

SEED_PATCH = [{"op": "add", "path": "/status/capacity/example.com~1dongle", "value": "4"}]


def status_of(error: pytest.ExceptionInfo[k8s.ApiException]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(error.value.body)
    return body


def test_create_get_list_and_refusals(core: k8s.CoreV1Api) -> None:
    created = core.create_node(node_object("node-a"))
    assert created.metadata.uid and created.metadata.resource_version
    assert core.read_node("node-a").metadata.labels == {"kubernetes.io/hostname": "node-a"}
    core.create_node(node_object("node-b"))
    listed = core.list_node()
    assert [n.metadata.name for n in listed.items] == ["node-a", "node-b"]
    assert int(listed.metadata.resource_version) >= int(created.metadata.resource_version) + 1

    with pytest.raises(k8s.ApiException) as missing:
        core.read_node("node-x")
    assert missing.value.status == 404
    assert status_of(missing) | {"details": None} == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'nodes "node-x" not found',
        "reason": "NotFound",
        "details": None,
        "code": 404,
    }
    with pytest.raises(k8s.ApiException) as again:
        core.create_node(node_object("node-a"))
    assert (again.value.status, status_of(again)["reason"]) == (409, "AlreadyExists")
    with pytest.raises(k8s.ApiException) as bad_name:
        core.create_node(node_object("Not_A_Name"))
    assert (bad_name.value.status, status_of(bad_name)["reason"]) == (422, "Invalid")
    assert status_of(bad_name)["details"]["causes"][0]["field"] == "metadata.name"
    assert [n.metadata.name for n in core.list_node().items] == ["node-a", "node-b"]


def test_the_documented_json_patch_adds_and_removes_a_resource(core: k8s.CoreV1Api) -> None:
    core.create_node(node_object("node-a"))
    before = core.read_node("node-a").metadata.resource_version
    patched = core.patch_node_status(
        "node-a", SEED_PATCH, _content_type="application/json-patch+json"
    )
    assert patched.status.capacity["example.com/dongle"] == "4"
    assert "example.com/dongle" not in patched.status.allocatable
    assert int(patched.metadata.resource_version) > int(before)
    # "~0" is "~" (after "~1" is "/"), which no resource name may contain.
    with pytest.raises(k8s.ApiException) as tilde:
        core.patch_node_status(
            "node-a",
            [{"op": "add", "path": "/status/capacity/example.com~1a~01", "value": "1"}],
            _content_type="application/json-patch+json",
        )
    assert status_of(tilde)["details"]["causes"][0]["field"] == "status.capacity[example.com/a~1]"
    removed = core.patch_node_status(
        "node-a",
        [
            {"op": "test", "path": "/status/capacity/example.com~1dongle", "value": "4"},
            {"op": "remove", "path": "/status/capacity/example.com~1dongle"},
            {"op": "replace", "path": "/status/capacity/cpu", "value": "8"},
        ],
        _content_type="application/json-patch+json",
    )
    assert "example.com/dongle" not in removed.status.capacity
    assert removed.status.capacity["cpu"] == "8"


def test_the_status_subresource_changes_only_status(core: k8s.CoreV1Api) -> None:
    core.create_node(node_object("node-a"))
    patched = core.patch_node_status(
        "node-a",
        [
            {"op": "add", "path": "/metadata/labels/zone", "value": "a"},
            {"op": "add", "path": "/status/capacity/example.com~1dongle", "value": "2"},
        ],
        _content_type="application/json-patch+json",
    )
    assert "zone" not in patched.metadata.labels
    assert patched.status.capacity["example.com/dongle"] == "2"
    # And the object itself leaves status alone.
    relabelled = core.patch_node(
        "node-a", {"metadata": {"labels": {"zone": "a"}}, "status": {"capacity": {"cpu": "1"}}}
    )
    assert relabelled.metadata.labels["zone"] == "a"
    assert relabelled.status.capacity["cpu"] == "4"


@pytest.mark.parametrize(
    ("operations", "code", "reason"),
    [
        ([{"op": "test", "path": "/status/capacity/cpu", "value": "99"}], 422, "Invalid"),
        ([{"op": "remove", "path": "/status/capacity/example.com~1none"}], 422, "Invalid"),
        (
            [{"op": "replace", "path": "/status/capacity/example.com~1none", "value": "1"}],
            422,
            "Invalid",
        ),
        ([{"op": "add", "path": "/status/nothing/here", "value": "1"}], 422, "Invalid"),
        (
            [{"op": "add", "path": "/status/capacity/example.com~1dongle", "value": "four"}],
            422,
            "Invalid",
        ),
        ([{"op": "jump", "path": "/status"}], 400, "BadRequest"),
        ({"op": "add"}, 400, "BadRequest"),
    ],
)
def test_a_patch_that_does_not_apply_changes_nothing(
    api: SimApiServer, core: k8s.CoreV1Api, operations: Any, code: int, reason: str
) -> None:
    core.create_node(node_object("node-a"))
    before = core.read_node("node-a").to_dict()
    status, body = http(
        api,
        "PATCH",
        "/api/v1/nodes/node-a/status",
        [{"op": "add", "path": "/status/capacity/example.com~1ok", "value": "1"}, operations]
        if isinstance(operations, dict)
        else [SEED_PATCH[0], *operations],
        content_type="application/json-patch+json",
    )
    assert (status, body["kind"], body["reason"], body["code"]) == (code, "Status", reason, code)
    # All or nothing: the valid first operation was not applied either.
    assert core.read_node("node-a").to_dict() == before


def test_patch_errors_for_unknown_nodes_bad_json_and_media_types(api: SimApiServer) -> None:
    status, body = http(
        api, "PATCH", "/api/v1/nodes/ghost/status", SEED_PATCH, "application/json-patch+json"
    )
    assert (status, body["reason"], body["message"]) == (404, "NotFound", 'nodes "ghost" not found')
    http(api, "POST", "/api/v1/nodes", node_object("node-a"))
    status, body = http(
        api, "PATCH", "/api/v1/nodes/node-a/status", b"[{", "application/json-patch+json"
    )
    assert (status, body["reason"]) == (400, "BadRequest")
    status, body = http(api, "PATCH", "/api/v1/nodes/node-a/status", SEED_PATCH, "text/plain")
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")
    status, body = http(api, "DELETE", "/api/v1/nodes/node-a/status")
    assert (status, body["reason"]) == (405, "MethodNotAllowed")
    status, body = http(api, "GET", "/api/v1/widgets")
    assert (status, body["reason"]) == (404, "NotFound")


def test_merge_and_strategic_merge_patches_as_the_kubelet_sends_them(
    api: SimApiServer, core: k8s.CoreV1Api
) -> None:
    node = node_object("node-a")
    node["status"]["conditions"].append({"type": "MemoryPressure", "status": "False"})
    core.create_node(node)
    # The kubelet's status patch: conditions merge by type, with $setElementOrder.
    status, body = http(
        api,
        "PATCH",
        "/api/v1/nodes/node-a/status",
        {
            "status": {
                "$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "Ready"}],
                "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}],
                "capacity": {"example.com/gpu": "8"},
                "allocatable": {"example.com/gpu": "6"},
            }
        },
        "application/strategic-merge-patch+json",
    )
    assert status == 200
    conditions = body["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["MemoryPressure", "Ready"]
    assert conditions[1] == {"type": "Ready", "status": "False", "reason": "KubeletNotReady"}
    assert body["status"]["capacity"] == {"cpu": "4", "memory": "8Gi", "example.com/gpu": "8"}
    # A merge patch replaces lists whole, and null removes a key.
    status, body = http(
        api,
        "PATCH",
        "/api/v1/nodes/node-a/status",
        {
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "capacity": {"memory": None},
            }
        },
        "application/merge-patch+json",
    )
    assert body["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    assert "memory" not in body["status"]["capacity"]


def test_a_stale_resource_version_is_a_conflict(api: SimApiServer, core: k8s.CoreV1Api) -> None:
    created = core.create_node(node_object("node-a"))
    core.patch_node_status("node-a", SEED_PATCH, _content_type="application/json-patch+json")
    current = core.read_node("node-a").to_dict()
    with pytest.raises(k8s.ApiException) as stale:
        core.patch_node_status(
            "node-a",
            {
                "metadata": {"resourceVersion": created.metadata.resource_version},
                "status": {"capacity": {"cpu": "1"}},
            },
            _content_type="application/merge-patch+json",
        )
    assert stale.value.status == 409
    assert status_of(stale)["reason"] == "Conflict"
    assert "the object has been modified" in status_of(stale)["message"]
    assert core.read_node("node-a").to_dict() == current
    # PUT with a stale version too.
    old = node_object("node-a")
    old["metadata"]["resourceVersion"] = created.metadata.resource_version
    status, body = http(api, "PUT", "/api/v1/nodes/node-a", old)
    assert (status, body["reason"]) == (409, "Conflict")
    # With the current version, the write goes through.
    fresh = dict(
        current,
        metadata={
            **node_object("node-a")["metadata"],
            "resourceVersion": current["metadata"]["resource_version"],
        },
    )
    fresh["metadata"]["labels"]["zone"] = "b"
    fresh.pop("status")
    status, body = http(api, "PUT", "/api/v1/nodes/node-a", fresh)
    assert status == 200, body
    assert body["metadata"]["labels"]["zone"] == "b"
    assert body["status"]["capacity"]["example.com/dongle"] == "4"


def test_a_write_that_changes_nothing_keeps_the_version(core: k8s.CoreV1Api) -> None:
    core.create_node(node_object("node-a"))
    first = core.patch_node_status(
        "node-a", SEED_PATCH, _content_type="application/json-patch+json"
    )
    second = core.patch_node_status(
        "node-a", SEED_PATCH, _content_type="application/json-patch+json"
    )
    assert first.metadata.resource_version == second.metadata.resource_version


def test_label_and_field_selectors(api: SimApiServer, core: k8s.CoreV1Api) -> None:
    for name, zone in (("node-a", "a"), ("node-b", "b"), ("node-c", "a")):
        node = node_object(name)
        node["metadata"]["labels"]["zone"] = zone
        core.create_node(node)
    assert [n.metadata.name for n in core.list_node(label_selector="zone=a").items] == [
        "node-a",
        "node-c",
    ]
    assert [n.metadata.name for n in core.list_node(label_selector="zone notin (a)").items] == [
        "node-b"
    ]
    assert [
        n.metadata.name for n in core.list_node(field_selector="metadata.name=node-b").items
    ] == ["node-b"]
    status, body = http(api, "GET", "/api/v1/nodes?fieldSelector=spec.color%3Dred")
    assert (status, body["reason"]) == (400, "BadRequest")


def test_lists_page_with_limit_and_continue(core: k8s.CoreV1Api) -> None:
    for i in range(5):
        core.create_node(node_object(f"node-{i}"))
    names, token, pages = [], None, 0
    while True:
        page = core.list_node(limit=2, _continue=token) if token else core.list_node(limit=2)
        names += [n.metadata.name for n in page.items]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
    assert names == [f"node-{i}" for i in range(5)]
    assert pages == 3


def test_authentication(api: SimApiServer) -> None:
    status, body = http(api, "GET", "/api/v1/nodes", token="not-a-token")
    assert (status, body["reason"], body["code"]) == (401, "Unauthorized", 401)
    assert http(api, "GET", "/api/v1/nodes")[0] == 200
    # kubectl sends no credentials over plain HTTP: such requests are the admin's.
    assert http(api, "GET", "/api/v1/nodes", token=None)[0] == 200
    assert http(api, "GET", "/version", token="not-a-token")[0] == 200
