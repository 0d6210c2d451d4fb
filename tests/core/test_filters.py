"""Every filter of /devices, /events and /nodes, and the stale flag of a node."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from .conftest import GPU, NIC, Api, MakeApi, dev, held, listandwatch, pod, podresources, wait_until


@pytest.fixture
def fleet(api: Api) -> Api:
    """Two nodes, two resources, odd device IDs, pods in two namespaces, one removed device."""
    api.ingest_listandwatch(
        listandwatch(
            "node-a",
            [
                dev("gpu_0"),
                dev("gpu%1", "Unhealthy"),
                dev("gpuX2"),
                dev("GPU-3", "Weird"),
                dev("gone"),
            ],
            1,
        )
    )
    api.ingest_listandwatch(
        listandwatch(
            "node-a",
            [dev("gpu_0"), dev("gpu%1", "Unhealthy"), dev("gpuX2"), dev("GPU-3", "Weird")],
            2,
        )
    )
    api.ingest_listandwatch(listandwatch("node-a", [dev("nic-0"), dev("nic-1")], 1, resource=NIC))
    api.ingest_listandwatch(listandwatch("node-b", [dev("gpu_0"), dev("gpu-9")], 1))
    api.ingest_podresources(
        podresources(
            "node-a",
            [
                pod("train", "ml", {"main": [held(GPU, "gpu_0")], "side": [held(NIC, "nic-1")]}),
                pod("serve", "web", {"main": [held(GPU, "gpuX2")]}),
            ],
            1,
        )
    )
    api.ingest_podresources(
        podresources("node-b", [pod("train", "ml", {"main": [held(GPU, "gpu-9")]})], 1)
    )
    return api


def ids(devices: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted((d["node"], d["device_id"]) for d in devices)


def test_device_filters(fleet: Api) -> None:
    f = fleet
    assert len(f.devices()) == 8
    assert ids(f.devices(node="node-b")) == [("node-b", "gpu-9"), ("node-b", "gpu_0")]
    assert {d["resource"] for d in f.devices(resource=NIC)} == {NIC}
    assert len(f.devices(resource=NIC)) == 2
    assert ids(f.devices(health="Unhealthy")) == [("node-a", "GPU-3"), ("node-a", "gpu%1")]
    assert len(f.devices(health="Healthy")) == 6
    assert f.devices(health="Unknown") == []
    assert ids(f.devices(allocated="true")) == [
        ("node-a", "gpuX2"),
        ("node-a", "gpu_0"),
        ("node-a", "nic-1"),
        ("node-b", "gpu-9"),
    ]
    assert len(f.devices(allocated="false")) == 4
    assert ids(f.devices(namespace="web")) == [("node-a", "gpuX2")]
    assert ids(f.devices(pod="train")) == [
        ("node-a", "gpu_0"),
        ("node-a", "nic-1"),
        ("node-b", "gpu-9"),
    ]
    assert ids(f.devices(namespace="ml", pod="train", node="node-b")) == [("node-b", "gpu-9")]
    assert f.devices(namespace="web", pod="train") == []
    assert ids(f.devices(state="removed")) == [("node-a", "gone")]
    assert len(f.devices(state="any")) == 9
    assert len(f.devices(state="present")) == 8
    assert ids(f.devices(node="node-a", resource=GPU, health="Healthy", allocated="false")) == []
    assert ids(f.devices(resource=GPU, allocated="false", health="Healthy")) == [
        ("node-b", "gpu_0")
    ]


def test_device_text_search_takes_percent_and_underscore_literally(fleet: Api) -> None:
    f = fleet
    assert ids(f.devices(q="_")) == [("node-a", "gpu_0"), ("node-b", "gpu_0")]
    assert ids(f.devices(q="%")) == [("node-a", "gpu%1")]
    assert ids(f.devices(q="u%1")) == [("node-a", "gpu%1")]
    assert ids(f.devices(q="gpu_")) == [("node-a", "gpu_0"), ("node-b", "gpu_0")]
    assert ids(f.devices(q="\\")) == []
    # A substring, case-insensitive.
    assert ids(f.devices(q="x2")) == [("node-a", "gpuX2")]
    assert len(f.devices(q="gpu")) == 6
    assert len(f.devices(q="")) == 8


def test_filter_values_are_checked(api: Api) -> None:
    cases: list[tuple[str, dict[str, str], str, str]] = [
        ("/api/v1/devices", {"health": "Sick"}, "health", "enum"),
        ("/api/v1/devices", {"state": "deleted"}, "state", "enum"),
        ("/api/v1/devices", {"allocated": "maybe"}, "allocated", "bool_parsing"),
        ("/api/v1/devices", {"sort": "-"}, "sort", "enum"),
        ("/api/v1/nodes", {"stale": "sometimes"}, "stale", "bool_parsing"),
        ("/api/v1/nodes", {"sort": "devices"}, "sort", "enum"),
        ("/api/v1/events", {"kind": "exploded"}, "kind", "enum"),
        ("/api/v1/events", {"since": "2026-12-02T10:00:00"}, "since", "timezone_aware"),
        ("/api/v1/events", {"since": "last week"}, "since", "datetime_from_date_parsing"),
        ("/api/v1/events", {"device": "abc"}, "device", "int_parsing"),
    ]
    for path, params, field, rule in cases:
        error = api.get(path, expect=422, **params)["error"]
        assert [(d["field"], d["rule"]) for d in error["details"]] == [(field, rule)], params


def test_event_filters(fleet: Api) -> None:
    f = fleet
    every = f.events()
    assert {e["node"] for e in f.events(node="node-b")} == {"node-b"}
    assert len(f.events(node="node-b")) == 1 + 2 + 1
    assert {e["resource"] for e in f.events(resource=NIC)} == {NIC}
    assert len(f.events(resource=NIC)) == 2 + 1
    removed = f.events(kind="device_removed")
    assert [(e["node"], e["device_id"]) for e in removed] == [("node-a", "gone")]
    assert len(f.events(kind="allocated")) == 4
    assert [e["pod"] for e in f.events(namespace="web")] == ["serve"]
    assert {e["id"] for e in f.events(pod="train")} <= {e["id"] for e in every}

    newest = every[0]["at"]
    later = f.events(since=newest)
    assert later and all(e["at"] >= newest for e in later)
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert f.events(since=future) == []
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    assert len(f.events(since=past)) == len(every)

    f.ingest_podresources(podresources("node-b", [], 2))
    after = f.events(since=f.events(kind="released")[0]["at"])
    assert "released" in {e["kind"] for e in after}


def test_device_events_filter(fleet: Api) -> None:
    device = next(d for d in fleet.devices(node="node-a") if d["device_id"] == "gpu_0")
    events = fleet.events(device=device["id"])
    assert {e["kind"] for e in events} == {"device_added", "allocated"}
    assert {e["device_id"] for e in events} == {"gpu_0"}


def test_node_filters(fleet: Api) -> None:
    f = fleet
    f.ingest_listandwatch(listandwatch("node-x1", [dev("x")], 1))
    names = [n["name"] for n in f.all_pages("/api/v1/nodes")]
    assert names == ["node-a", "node-b", "node-x1"]
    assert [n["name"] for n in f.all_pages("/api/v1/nodes", q="-b")] == ["node-b"]
    assert [n["name"] for n in f.all_pages("/api/v1/nodes", q="_")] == []
    assert [n["name"] for n in f.all_pages("/api/v1/nodes", q="%")] == []
    assert [n["name"] for n in f.all_pages("/api/v1/nodes", q="NODE-X")] == ["node-x1"]
    assert [n["name"] for n in f.all_pages("/api/v1/nodes", resource=NIC)] == ["node-a"]
    assert [n["name"] for n in f.all_pages("/api/v1/nodes", resource="example.com/none")] == []
    assert [n["name"] for n in f.all_pages("/api/v1/nodes", stale="false")] == names
    assert f.all_pages("/api/v1/nodes", stale="true") == []


def test_node_counts_per_resource(fleet: Api) -> None:
    node = fleet.get("/api/v1/nodes/node-a")
    assert node["resources"] == {
        GPU: {"devices": 4, "healthy": 2, "unhealthy": 2, "unknown": 0, "allocated": 2, "free": 0},
        NIC: {"devices": 2, "healthy": 2, "unhealthy": 0, "unknown": 0, "allocated": 1, "free": 1},
    }
    [gpu, nic] = fleet.get("/api/v1/resources")["results"]
    assert gpu["resource"] == GPU and nic["resource"] == NIC
    assert gpu["totals"] == {
        "devices": 6,
        "healthy": 4,
        "unhealthy": 2,
        "unknown": 0,
        "allocated": 3,
        "free": 1,
        "nodes": 2,
    }
    # Per-node counts are on the nodes, paged like any list, not embedded in the resource.
    assert "nodes" not in gpu
    with_gpu = fleet.all_pages("/api/v1/nodes", resource=GPU)
    assert [n["name"] for n in with_gpu] == ["node-a", "node-b"]
    assert with_gpu[1]["resources"][GPU] == {
        "devices": 2,
        "healthy": 2,
        "unhealthy": 0,
        "unknown": 0,
        "allocated": 1,
        "free": 1,
    }


def test_pod_filters(fleet: Api) -> None:
    pods = fleet.get("/api/v1/pods")["results"]
    assert [(p["namespace"], p["name"]) for p in pods] == [("ml", "train"), ("web", "serve")]
    ml_train = fleet.get("/api/v1/pods/ml/train")
    assert sorted(ml_train["nodes"]) == ["node-a", "node-b"]
    assert [c["name"] for c in ml_train["containers"]] == ["main", "side"]
    assert [p["name"] for p in fleet.get("/api/v1/pods", namespace="web")["results"]] == ["serve"]
    assert [p["name"] for p in fleet.get("/api/v1/pods", node="node-b")["results"]] == ["train"]
    assert [p["name"] for p in fleet.get("/api/v1/pods", q="erv")["results"]] == ["serve"]
    assert fleet.get("/api/v1/pods", q="%")["results"] == []


def test_stale_node_shows_its_devices_unknown(make_api: MakeApi) -> None:
    # Made first, so it is the app that leads and runs the stale sweep (with its setting).
    # Long enough that node-new stays fresh through the checks below on a busy machine.
    quick = make_api(stale_after=8.0)
    quick.ingest_listandwatch(
        listandwatch("node-old", [dev("gpu-0"), dev("gpu-1", "Unhealthy")], 1)
    )
    quick.ingest_podresources(
        podresources("node-old", [pod("p", containers={"c": [held(GPU, "gpu-0")]})], 1)
    )

    def old_is_stale() -> bool:
        return bool(quick.get("/api/v1/nodes/node-old")["stale"])

    wait_until(old_is_stale, what="node-old to turn stale")
    quick.ingest_listandwatch(listandwatch("node-new", [dev("gpu-0")], 1))

    nodes = {n["name"]: n for n in quick.get("/api/v1/nodes")["results"]}
    assert (nodes["node-old"]["stale"], nodes["node-new"]["stale"]) == (True, False)
    assert nodes["node-old"]["resources"][GPU]["unknown"] == 2
    assert nodes["node-old"]["resources"][GPU]["healthy"] == 0
    assert nodes["node-old"]["resources"][GPU]["free"] == 0
    old = {d["device_id"]: d for d in quick.devices(node="node-old")}
    assert {k: (v["health"], v["raw_health"], v["node_stale"]) for k, v in old.items()} == {
        "gpu-0": ("Unknown", "Healthy", True),
        "gpu-1": ("Unknown", "Unhealthy", True),
    }
    # A stale device is still held: staleness hides health, not allocations.
    assert old["gpu-0"]["allocation"]["pod"] == "p"
    assert ids(quick.devices(health="Unknown")) == [("node-old", "gpu-0"), ("node-old", "gpu-1")]
    assert ids(quick.devices(health="Healthy")) == [("node-new", "gpu-0")]
    assert ids(quick.devices(health="Unhealthy")) == []
    assert [n["name"] for n in quick.get("/api/v1/nodes", stale="true")["results"]] == ["node-old"]
    assert [n["name"] for n in quick.get("/api/v1/nodes", stale="false")["results"]] == ["node-new"]
    [resource] = quick.get("/api/v1/resources")["results"]
    assert resource["totals"]["unknown"] == 2
    pod_devices = quick.get("/api/v1/pods/ml/p")["containers"][0]["devices"]
    assert [d["health"] for d in pod_devices] == ["Unknown"]

    # The sweep records the transition once; the next snapshot brings the node back.
    wait_until(lambda: quick.events(kind="node_stale"), what="a node_stale event")
    assert [e["node"] for e in quick.events(kind="node_stale")] == ["node-old"]
    quick.ingest_listandwatch(
        listandwatch("node-old", [dev("gpu-0"), dev("gpu-1", "Unhealthy")], 2)
    )
    assert quick.get("/api/v1/nodes/node-old")["stale"] is False
    assert [e["node"] for e in quick.events(kind="node_seen")] == ["node-old"]
    # With the default setting nothing is stale after a second or two.
    assert make_api().get("/api/v1/nodes", stale="true")["results"] == []


def test_pods_count_counts_each_pod_once_across_plugin_and_claim_holders(api: Api) -> None:
    def claim(device: str) -> dict[str, Any]:
        return {
            "claim_name": f"claim-{device}",
            "claim_namespace": "ml",
            "claim_resources": [
                {"driver_name": "gpu.example.com", "pool_name": "node-a", "device_name": device}
            ],
        }

    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1))
    plugin_only = [pod("plugin-a", containers={"m": [held(GPU, "gpu-0")]})]
    api.ingest_podresources(podresources("node-a", plugin_only, 1))
    # Pods in one table only: the count is that table's.
    assert api.get("/api/v1/pods")["count"] == 1
    assert api.get("/api/v1/pods", q="plugin")["count"] == 1
    both = {
        **pod("both-b"),
        "containers": [
            {"name": "m", "devices": [held(GPU, "gpu-1")], "dynamic_resources": [claim("d0")]}
        ],
    }
    claim_only = {
        **pod("claim-c"),
        "containers": [{"name": "m", "devices": [], "dynamic_resources": [claim("d1")]}],
    }
    api.ingest_podresources(podresources("node-a", [*plugin_only, both, claim_only], 2))
    page = api.get("/api/v1/pods")
    assert [p["name"] for p in page["results"]] == ["both-b", "claim-c", "plugin-a"]
    assert (page["count"], page["count_exact"]) == (3, True)
    assert api.get("/api/v1/pods", q="b")["count"] == 1
    assert api.get("/api/v1/pods", q="-")["count"] == 3


def test_nodes_by_resource_lists_nodes_with_a_present_device_of_it(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("nic-0")], 1, resource=NIC))
    api.ingest_listandwatch(listandwatch("node-b", [dev("nic-0")], 1, resource=NIC))
    api.ingest_listandwatch(listandwatch("node-c", [dev("gpu-0")], 1))
    assert [n["name"] for n in api.all_pages("/api/v1/nodes", resource=NIC)] == [
        "node-a",
        "node-b",
    ]
    # node-a's NIC goes: its row stays (removed), but it has no present NIC.
    api.ingest_listandwatch(listandwatch("node-a", [], 2, resource=NIC))
    page = api.get("/api/v1/nodes", resource=NIC)
    assert ([n["name"] for n in page["results"]], page["count"]) == (["node-b"], 1)
    assert api.get("/api/v1/nodes", resource="example.com/none")["results"] == []
