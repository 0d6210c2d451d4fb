"""Watches as the official client reads them, and a restart that continues where it stopped."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch

from devicedeck.sim.apiserver import SimApiServer

from .conftest import http, node_object, pod_object


def collect(list_call: Any, count: int, **kwargs: Any) -> list[tuple[str, str, str]]:
    """The first `count` events of a watch: (type, name, resourceVersion)."""
    events = []
    stream = watch.Watch()
    for event in stream.stream(list_call, timeout_seconds=20, **kwargs):
        obj = event["raw_object"]
        events.append(
            (event["type"], obj["metadata"].get("name", ""), obj["metadata"]["resourceVersion"])
        )
        if len(events) == count:
            stream.stop()
    return events


def test_a_watch_from_a_version_sees_every_later_change_in_order(core: k8s.CoreV1Api) -> None:
    start = core.list_node().metadata.resource_version
    core.create_node(node_object("node-a"))
    core.patch_node_status(
        "node-a",
        [{"op": "add", "path": "/status/capacity/example.com~1dongle", "value": "4"}],
        _content_type="application/json-patch+json",
    )
    core.delete_node("node-a")
    events = collect(core.list_node, 3, resource_version=start)
    assert [(t, n) for t, n, _ in events] == [
        ("ADDED", "node-a"),
        ("MODIFIED", "node-a"),
        ("DELETED", "node-a"),
    ]
    versions = [int(v) for _, _, v in events]
    assert versions == sorted(versions) and len(set(versions)) == 3


def test_a_watch_without_a_version_starts_with_what_exists(core: k8s.CoreV1Api) -> None:
    core.create_node(node_object("node-a"))
    core.create_node(node_object("node-b"))
    received: list[tuple[str, str, str]] = []

    def later() -> None:
        core.create_node(node_object("node-c"))

    timer = threading.Timer(0.5, later)
    timer.start()
    try:
        received = collect(core.list_node, 3)
    finally:
        timer.join()
    assert [(t, n) for t, n, _ in received] == [
        ("ADDED", "node-a"),
        ("ADDED", "node-b"),
        ("ADDED", "node-c"),
    ]


def test_pod_watch_with_a_field_selector(core: k8s.CoreV1Api) -> None:
    start = core.list_pod_for_all_namespaces().metadata.resource_version
    core.create_namespaced_pod("ml", pod_object("ml", "other", node="node-b"))
    core.create_namespaced_pod("ml", pod_object("ml", "mine", node="node-a"))
    core.delete_namespaced_pod("mine", "ml")
    events = collect(
        core.list_pod_for_all_namespaces,
        2,
        resource_version=start,
        field_selector="spec.nodeName=node-a",
    )
    assert [(t, n) for t, n, _ in events] == [("ADDED", "mine"), ("DELETED", "mine")]


def test_state_survives_a_restart_and_versions_keep_increasing(data_dir: Path) -> None:
    with SimApiServer(data_dir) as first:
        http(first, "POST", "/api/v1/nodes", node_object("node-a"))
        http(first, "POST", "/api/v1/namespaces/ml/pods", pod_object("ml", "train", "node-a"))
        _, listed = http(first, "GET", "/api/v1/nodes")
        token = first.store.admin_token
    with SimApiServer(data_dir) as second:
        assert second.store.admin_token == token
        _, nodes = http(second, "GET", "/api/v1/nodes")
        assert [n["metadata"]["name"] for n in nodes["items"]] == ["node-a"]
        _, pods = http(second, "GET", "/api/v1/pods")
        assert [p["metadata"]["name"] for p in pods["items"]] == ["train"]
        old = int(listed["metadata"]["resourceVersion"])
        _, created = http(second, "POST", "/api/v1/nodes", node_object("node-b"))
        assert int(created["metadata"]["resourceVersion"]) > old
        # The history before the restart is gone: a watch from before it answers 410.
        status, body = http(second, "GET", f"/api/v1/nodes?watch=true&resourceVersion={old - 1}")
        assert status == 200
        assert body["type"] == "ERROR"
        assert (body["object"]["code"], body["object"]["reason"]) == (410, "Expired")
