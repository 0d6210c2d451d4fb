"""Node capacity and allocatable from the API server, and the watch's recovery paths."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from devicedeck.sim.apiserver.resources import NODES

from .conftest import Factory, StartApp, ingest_devices, wait_for
from .fake_apiserver import FakeApiServer
from .objects import node

GPU = "example.com/gpu"
DONGLE = "example.com/dongle"


def _node(client: TestClient, auth: dict[str, str], name: str) -> dict[str, Any] | None:
    response = client.get(f"/api/v1/nodes/{name}", headers=auth)
    return response.json() if response.status_code == 200 else None


def _row(detail: dict[str, Any], resource: str) -> dict[str, Any]:
    return next(r for r in detail["extended_resources"] if r["resource"] == resource)


def test_capacity_allocatable_and_the_difference_are_shown(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str], session_factory: Factory
) -> None:
    devices = {f"gpu-{i}": "Healthy" for i in range(6)} | {"gpu-6": "Unhealthy", "gpu-7": "x"}
    ingest_devices(session_factory, "node-a", GPU, devices)
    fake_api.put(
        "nodes",
        node(
            "node-a",
            capacity={GPU: "8", DONGLE: "4"},
            allocatable={GPU: "6", DONGLE: "4"},
            labels={"zone": "a"},
        ),
    )
    client = start_app()

    detail = wait_for(
        lambda: (d := _node(client, auth, "node-a")) and d["kube_synced_at"] and d,
        what="node-a synced from the API server",
    )
    assert detail["capacity"][GPU] == "8"
    assert detail["allocatable"][GPU] == "6"
    assert detail["labels"] == {"zone": "a"}
    assert detail["conditions"][0]["type"] == "Ready"
    assert "lastHeartbeatTime" not in detail["conditions"][0]
    gpu = _row(detail, GPU)
    assert gpu["source"] == "device_plugin"
    assert (gpu["capacity"], gpu["allocatable"], gpu["unavailable"]) == (8, 6, 2)
    assert gpu["degraded"] is True
    assert "2 of 8" in gpu["problem"]
    assert (gpu["devices"], gpu["healthy_devices"]) == (8, 6)
    # The hand-advertised dongle has no devices anywhere: shown apart, as counts.
    assert [r["resource"] for r in detail["manual_extended_resources"]] == [DONGLE]
    dongle = detail["manual_extended_resources"][0]
    assert (dongle["capacity"], dongle["allocatable"], dongle["devices"]) == (4, 4, 0)
    assert dongle["degraded"] is False

    # A change through the watch: the node recovers.
    fake_api.put("nodes", node("node-a", capacity={GPU: "8", DONGLE: "4"}, labels={"zone": "a"}))
    detail = wait_for(
        lambda: (d := _node(client, auth, "node-a")) and _row(d, GPU)["unavailable"] == 0 and d,
        what="allocatable 8 through the watch",
    )
    assert _row(detail, GPU)["degraded"] is False

    # A node only the API server knows gets a row (and a node_added event).
    fake_api.put("nodes", node("node-b", capacity={GPU: "0"}))
    detail = wait_for(lambda: _node(client, auth, "node-b"), what="node-b created")
    assert detail["capacity"][GPU] == "0"
    added = client.get("/api/v1/events?kind=node_added&node=node-b", headers=auth).json()
    assert [e["actor"] for e in added["results"]] == ["kube-watcher"]


def test_relists_after_410_gone_and_sees_changes_lost_to_compaction(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    fake_api.put("nodes", node("node-a", capacity={GPU: "4"}))
    client = start_app()
    wait_for(lambda: (d := _node(client, auth, "node-a")) and d["kube_synced_at"], what="sync")
    lists_before = fake_api.lists("/api/v1/nodes")

    # The change happens while the history is compacted away: no watch event carries it.
    fake_api.put("nodes", node("node-a", capacity={GPU: "4"}, allocatable={GPU: "1"}), silent=True)
    fake_api.expire_history()

    detail = wait_for(
        lambda: (d := _node(client, auth, "node-a")) and d["allocatable"][GPU] == "1" and d,
        what="the silent change, through a relist",
    )
    assert _row(detail, GPU)["unavailable"] == 3
    assert fake_api.lists("/api/v1/nodes") > lists_before
    watch = wait_for(
        lambda: (w := _watch_status(client, auth, "nodes"))["state"] == "watching" and w,
        what="the nodes watch back to watching",
    )
    assert watch["lists"] >= 2


def test_reconnects_after_a_dropped_watch_without_relisting(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    fake_api.put("nodes", node("node-a", capacity={GPU: "4"}))
    client = start_app()
    wait_for(lambda: (d := _node(client, auth, "node-a")) and d["kube_synced_at"], what="sync")
    lists_before = fake_api.lists("/api/v1/nodes")
    watches_before = len(fake_api.recorded("GET", "/api/v1/nodes")) - lists_before

    # A bookmark moves the watch's resourceVersion on without any change to apply.
    bookmark = fake_api.bookmark("nodes")
    fake_api.drop_watches()
    wait_for(
        lambda: len(fake_api.recorded("GET", "/api/v1/nodes")) - lists_before > watches_before,
        what="a new watch request",
    )
    assert fake_api.recorded("GET", "/api/v1/nodes")[-1].query["resourceVersion"] == [str(bookmark)]
    fake_api.put("nodes", node("node-a", capacity={GPU: "5"}))
    wait_for(
        lambda: (d := _node(client, auth, "node-a")) and d["capacity"][GPU] == "5",
        what="the change after reconnecting",
    )
    # The watch resumed from its resourceVersion: no list was needed.
    assert fake_api.lists("/api/v1/nodes") == lists_before
    last_watch = fake_api.recorded("GET", "/api/v1/nodes")[-1]
    assert last_watch.query["watch"] == ["true"]
    assert last_watch.query["allowWatchBookmarks"] == ["true"]
    assert last_watch.headers["authorization"] == "Bearer fake-service-account-token"


def test_periodic_resync_relists(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    fake_api.put("nodes", node("node-a", capacity={GPU: "4"}))
    client = start_app(kube_resync=1.0)
    wait_for(lambda: (d := _node(client, auth, "node-a")) and d["kube_synced_at"], what="sync")
    fake_api.put("nodes", node("node-a", capacity={GPU: "4"}, allocatable={GPU: "2"}), silent=True)
    wait_for(
        lambda: (d := _node(client, auth, "node-a")) and d["allocatable"][GPU] == "2",
        what="the silent change, through the periodic relist",
    )


def _watch_status(client: TestClient, auth: dict[str, str], resource: str) -> dict[str, Any]:
    status = client.get("/api/v1/cluster/status", headers=auth).json()
    return next(w for w in status["watches"] if w["resource"] == resource)


def test_page_and_api_agree_on_what_was_advertised_by_hand(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str], session_factory: Factory
) -> None:
    """One rule (the kubelet's extended resource name) decides for both: a capacity entry such
    as `Example.com/Foo`, which is no extended resource name, is advertised by hand on
    neither."""
    ingest_devices(session_factory, "node-a", GPU, {"gpu-0": "Healthy", "gpu-1": "Healthy"})
    capacity = {GPU: "2", DONGLE: "4", "Example.com/Foo": "1", "cpu": "8"}
    fake_api.put("nodes", node("node-a", capacity=capacity, allocatable=capacity))
    client = start_app()

    detail = wait_for(
        lambda: (d := _node(client, auth, "node-a")) and d["kube_synced_at"] and d,
        what="node-a synced from the API server",
    )
    assert [r["resource"] for r in detail["manual_extended_resources"]] == [DONGLE]
    page = client.get("/nodes/node-a", headers=auth)
    assert page.status_code == 200
    by_hand = page.text.split('id="manual-title"', 1)[1].split("</section>", 1)[0]
    assert re.findall(r'<th scope="row" class="mono">([^<]*)</th>', by_hand) == [DONGLE]
    assert "Kubernetes: capacity 2, allocatable 2" in page.text


def test_cordon_taints_and_trouble_are_read_from_the_cluster(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str], session_factory: Factory
) -> None:
    ingest_devices(session_factory, "node-a", GPU, {"gpu-0": "Healthy"})
    ingest_devices(session_factory, "node-c", GPU, {"gpu-0": "Healthy"})
    pressed = node("node-a", capacity={GPU: "1"})
    pressed["status"]["conditions"].append(
        {"type": "DiskPressure", "status": "True", "reason": "KubeletHasDiskPressure"}
    )
    pressed["spec"] = {"taints": [{"key": "example.com/maintenance", "effect": "NoExecute"}]}
    fake_api.put("nodes", pressed)
    client = start_app()

    detail = wait_for(
        lambda: (d := _node(client, auth, "node-a")) and d["kubernetes"] and d,
        what="node-a synced from the API server",
    )
    state = detail["kubernetes"]
    assert (state["status"], state["ready"], state["unschedulable"]) == ("Ready", "True", False)
    assert state["trouble"] == ["DiskPressure"]
    assert state["ready_reason"] == "KubeletReady"
    # The fake applies the node controllers' taints, as a cluster does a moment later.
    assert [(t["key"], t["effect"]) for t in state["taints"]] == [
        ("example.com/maintenance", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ]
    # A node the cluster does not know has no Kubernetes state.
    assert _node(client, auth, "node-c")["kubernetes"] is None

    # kubectl cordon node-a, as the JSON patch it amounts to; the watch brings it.
    fake_api.store.update(
        NODES,
        None,
        "node-a",
        [{"op": "add", "path": "/spec/unschedulable", "value": True}],
        content_type="application/json-patch+json",
    )
    listed = wait_for(
        lambda: (
            (rows := client.get("/api/v1/nodes", headers=auth).json()["results"])
            and rows[0]["kubernetes"]["unschedulable"]
            and rows
        ),
        what="the cordon through the watch",
    )
    assert listed[0]["kubernetes"]["status"] == "Ready,SchedulingDisabled"
    assert "node.kubernetes.io/unschedulable" in [
        t["key"] for t in listed[0]["kubernetes"]["taints"]
    ]
    assert listed[1]["name"] == "node-c" and listed[1]["kubernetes"] is None


def _cell(page: str, start_marker: str, end_marker: str) -> str:
    start = page.index(start_marker)
    return page[start : page.index(end_marker, start)]


def test_the_nodes_list_and_node_page_show_the_kubernetes_state(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str], session_factory: Factory
) -> None:
    ingest_devices(session_factory, "node-a", GPU, {"gpu-0": "Healthy"})
    ingest_devices(session_factory, "node-b", GPU, {"gpu-0": "Healthy"})
    troubled = node("node-a", capacity={GPU: "1"}, ready="False")
    troubled["status"]["conditions"][0]["message"] = "container runtime is down"
    troubled["status"]["conditions"].append({"type": "MemoryPressure", "status": "True"})
    troubled["spec"] = {"unschedulable": True}
    fake_api.put("nodes", troubled)
    fake_api.put("nodes", node("node-b", capacity={GPU: "1"}))
    client = start_app()
    wait_for(
        lambda: all(
            (d := _node(client, auth, name)) and d["kubernetes"] for name in ("node-a", "node-b")
        ),
        what="both nodes synced from the API server",
    )

    listing = client.get("/nodes", headers=auth).text
    row_a = _cell(listing, 'href="/nodes/node-a"', "</tr>")
    for word in ("NotReady", "SchedulingDisabled", "MemoryPressure"):
        assert f">{word}</span>" in row_a
    row_b = _cell(listing, 'href="/nodes/node-b"', "</tr>")
    assert "Reporting" in row_b and "tag-bad" not in row_b and "SchedulingDisabled" not in row_b

    page = client.get("/nodes/node-a", headers=auth).text
    assert ">SchedulingDisabled</span>" in _cell(page, "<h1", "</h1>")
    card = _cell(page, 'id="kube-title"', "</section>")
    assert '<dd class="mono" id="kube-status">NotReady,SchedulingDisabled</dd>' in card
    assert "container runtime is down" in card
    assert "Cordoned" in card
    taints = _cell(card, 'aria-label="Taints"', "</ul>")
    for key in ("unschedulable", "not-ready", "memory-pressure"):
        assert f"node.kubernetes.io/{key}" in taints
