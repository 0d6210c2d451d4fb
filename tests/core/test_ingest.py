"""Ingest semantics through the HTTP API: replace, history, ordering, idempotency."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from devicedeck.inventory.schemas import (
    ListAndWatchSnapshot,
    PodResourcesSnapshot,
    container_content,
    devices_content,
)

from .conftest import BOOT, GPU, NIC, Api, dev, held, listandwatch, pod, podresources


def kinds(api: Api, **params: object) -> Counter[str]:
    return Counter(e["kind"] for e in api.events(**params))


def by_id(devices: list[dict]) -> dict[str, dict]:
    return {d["device_id"]: d for d in devices}


def test_listandwatch_replaces_the_device_list_of_one_resource(api: Api) -> None:
    first = api.ingest_listandwatch(
        listandwatch("node-a", [dev("gpu-0"), dev("gpu-1"), dev("gpu-2")], 1)
    )
    assert first["added"] == 3 and first["changed"] is True
    api.ingest_listandwatch(listandwatch("node-a", [dev("nic-0")], 1, resource=NIC))

    second = api.ingest_listandwatch(
        listandwatch("node-a", [dev("gpu-0"), dev("gpu-1"), dev("gpu-3")], 2)
    )
    assert (second["added"], second["removed"]) == (1, 1)

    present = by_id(api.devices(node="node-a", resource=GPU))
    assert sorted(present) == ["gpu-0", "gpu-1", "gpu-3"]
    removed = by_id(api.devices(node="node-a", state="removed"))
    assert list(removed) == ["gpu-2"]
    assert removed["gpu-2"]["removed_at"] is not None
    # The other resource of the node is untouched by a GPU snapshot.
    assert [d["device_id"] for d in api.devices(node="node-a", resource=NIC)] == ["nic-0"]


def test_removed_device_reappears_as_the_same_device(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1))
    before = api.device("node-a", "gpu-1")
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 2))
    gone = api.device("node-a", "gpu-1")
    assert gone["state"] == "removed" and gone["removed_at"] is not None

    result = api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 3))
    assert result["reappeared"] == 1 and result["added"] == 0
    back = api.device("node-a", "gpu-1")
    assert back["id"] == before["id"]
    assert back["state"] == "present" and back["removed_at"] is None
    assert back["first_seen"] == before["first_seen"]
    assert [h["kind"] for h in back["health_history"]] == [
        "device_reappeared",
        "device_removed",
        "device_added",
    ]
    assert kinds(api, kind="device_removed")["device_removed"] == 1


def test_health_transition_is_recorded_once(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1))
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0", "Unhealthy"), dev("gpu-1")], 2))
    # Still unhealthy while something else changes: no second health event for gpu-0.
    api.ingest_listandwatch(
        listandwatch("node-a", [dev("gpu-0", "Unhealthy"), dev("gpu-1"), dev("gpu-2")], 3)
    )
    api.ingest_listandwatch(
        listandwatch("node-a", [dev("gpu-0", "Unhealthy"), dev("gpu-1"), dev("gpu-2")], 4)
    )
    assert kinds(api, kind="health_changed")["health_changed"] == 1

    result = api.ingest_listandwatch(
        listandwatch("node-a", [dev("gpu-0"), dev("gpu-1"), dev("gpu-2")], 5)
    )
    assert result["health_changes"] == 1
    detail = api.device("node-a", "gpu-0")
    assert [(h["kind"], h["health"]) for h in detail["health_history"]] == [
        ("health_changed", "Healthy"),
        ("health_changed", "Unhealthy"),
        ("device_added", "Healthy"),
    ]
    assert detail["health"] == "Healthy"


def test_anything_but_healthy_is_unhealthy_and_the_raw_value_is_kept(api: Api) -> None:
    devices = [
        dev("a", "Healthy"),
        dev("b", "Unhealthy"),
        dev("c", "healthy"),
        dev("d", "XID 79"),
        dev("e", ""),
    ]
    api.ingest_listandwatch(listandwatch("node-a", devices, 1))
    found = by_id(api.devices(node="node-a"))
    assert {k: (v["health"], v["raw_health"]) for k, v in found.items()} == {
        "a": ("Healthy", "Healthy"),
        "b": ("Unhealthy", "Unhealthy"),
        "c": ("Unhealthy", "healthy"),
        "d": ("Unhealthy", "XID 79"),
        "e": ("Unhealthy", ""),
    }
    assert all(d["health_source"] == "plugin" for d in found.values())
    # A device with no health field at all is not Healthy either.
    api.ingest_listandwatch(listandwatch("node-a", [{"ID": "f"}], 1, resource=NIC))
    assert api.devices(node="node-a", resource=NIC)[0]["health"] == "Unhealthy"


def test_podresources_lists_a_device_once_per_numa_node(api: Api) -> None:
    entries = [held(GPU, "gpu-0", numa=[0]), held(GPU, "gpu-0", numa=[1]), held(GPU, "gpu-1")]
    result = api.ingest_podresources(
        podresources("node-a", [pod("train", containers={"main": entries})], 1)
    )
    assert result["allocated"] == 2

    devices = by_id(api.devices(node="node-a"))
    assert devices["gpu-0"]["numa_nodes"] == [0, 1]
    assert devices["gpu-1"]["numa_nodes"] == []
    got = api.get("/api/v1/pods/ml/train")
    assert [d["device_id"] for d in got["containers"][0]["devices"]] == ["gpu-0", "gpu-1"]
    assert kinds(api, kind="allocated")["allocated"] == 2


def test_plugin_snapshot_merges_numa_nodes_of_one_device(api: Api) -> None:
    topology = {"nodes": [{"ID": 1}, {"ID": 0}, {"ID": 1}]}
    api.ingest_listandwatch(
        listandwatch("node-a", [{"ID": "gpu-0", "health": "Healthy", "topology": topology}], 1)
    )
    assert api.devices(node="node-a")[0]["numa_nodes"] == [0, 1]


def test_allocation_starts_and_ends_and_history_is_kept(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1))
    trainer = pod("trainer", containers={"main": [held(GPU, "gpu-0")]}, uid="uid-1")
    first = api.ingest_podresources(podresources("node-a", [trainer], 1))
    assert first["allocated"] == 1

    holding = by_id(api.devices(node="node-a"))
    assert holding["gpu-0"]["allocation"]["pod"] == "trainer"
    assert holding["gpu-0"]["allocation"]["container"] == "main"
    assert holding["gpu-0"]["allocation"]["pod_uid"] == "uid-1"
    assert holding["gpu-1"]["allocation"] is None
    assert [d["device_id"] for d in api.devices(allocated=True)] == ["gpu-0"]

    # The pod vanished from the kubelet's list: its allocation ends.
    gone = api.ingest_podresources(podresources("node-a", [], 2))
    assert gone["released"] == 1
    assert api.devices(allocated=True) == []
    assert api.get("/api/v1/pods", state="running")["results"] == []
    [listed] = api.get("/api/v1/pods", state="finished")["results"]
    assert (listed["namespace"], listed["name"], listed["running"]) == ("ml", "trainer", False)
    # A finished pod keeps its page: what it held, and until when.
    finished = api.get("/api/v1/pods/ml/trainer")
    assert finished["running"] is False
    assert [d["ended"] is not None for d in finished["containers"][0]["devices"]] == [True]

    detail = api.device("node-a", "gpu-0")
    assert detail["allocation"] is None
    [period] = detail["allocation_history"]
    assert (period["namespace"], period["pod"], period["container"]) == ("ml", "trainer", "main")
    assert period["started"] is not None and period["ended"] is not None
    assert period["started"] <= period["ended"]
    released = api.events(kind="released")
    assert [(e["pod"], e["device_id"]) for e in released] == [("trainer", "gpu-0")]

    # A new pod later takes the same device: a second interval, the first one kept.
    api.ingest_podresources(
        podresources("node-a", [pod("eval", containers={"main": [held(GPU, "gpu-0")]})], 3)
    )
    history = api.device("node-a", "gpu-0")["allocation_history"]
    assert [(p["pod"], p["ended"] is None) for p in history] == [("eval", True), ("trainer", False)]


def test_pod_recreated_under_the_same_name_starts_a_new_allocation(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 1))
    first = pod("trainer", containers={"main": [held(GPU, "gpu-0")]}, uid="uid-1")
    api.ingest_podresources(podresources("node-a", [first], 1))
    again = pod("trainer", containers={"main": [held(GPU, "gpu-0")]}, uid="uid-2")
    result = api.ingest_podresources(podresources("node-a", [again], 2))

    assert (result["released"], result["allocated"]) == (1, 1)
    history = api.device("node-a", "gpu-0")["allocation_history"]
    assert [(p["pod_uid"], p["ended"] is None) for p in history] == [
        ("uid-2", True),
        ("uid-1", False),
    ]


def test_device_referenced_before_any_plugin_snapshot_is_unknown(api: Api) -> None:
    api.ingest_podresources(
        podresources("node-b", [pod("early", containers={"c": [held(GPU, "gpu-7")]})], 1)
    )
    [device] = api.devices(node="node-b")
    assert (device["device_id"], device["health"], device["raw_health"]) == (
        "gpu-7",
        "Unknown",
        None,
    )
    assert device["allocation"]["pod"] == "early"

    result = api.ingest_listandwatch(listandwatch("node-b", [dev("gpu-7")], 1))
    assert result["health_changes"] == 1 and result["added"] == 0
    [device] = api.devices(node="node-b")
    assert (device["health"], device["health_source"]) == ("Healthy", "plugin")
    assert device["allocation"]["pod"] == "early"


def test_same_snapshot_again_is_an_idempotent_success(
    api: Api, db_rows: Callable[..., dict]
) -> None:
    body = listandwatch("node-a", [dev("gpu-0"), dev("gpu-1", "Unhealthy")], 7)
    api.ingest_listandwatch(body)
    pr_body = podresources("node-a", [pod("p", containers={"c": [held(GPU, "gpu-0")]})], 3)
    api.ingest_podresources(pr_body)
    before = db_rows(skip={"nodes": {"last_seen"}})

    repeat = api.ingest_listandwatch(body)
    assert repeat["duplicate"] is True and repeat["changed"] is False
    assert api.ingest_podresources(pr_body)["duplicate"] is True
    assert db_rows(skip={"nodes": {"last_seen"}}) == before


def test_older_seq_of_the_same_boot_is_refused_and_changes_nothing(
    api: Api, db_rows: Callable[..., dict]
) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 5))
    api.ingest_podresources(podresources("node-a", [], 5))
    before = db_rows()

    stale = api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-9")], 4), expect=409)
    assert stale["error"]["code"] == "stale_snapshot"
    assert stale["error"]["details"][0]["field"] == "source.seq"
    assert stale["error"]["details"][0]["rule"] == "increasing"
    stale_pr = api.ingest_podresources(
        podresources("node-a", [pod("x", containers={})], 2), expect=409
    )
    assert stale_pr["error"]["code"] == "stale_snapshot"
    assert db_rows() == before


def test_same_seq_with_other_content_is_a_conflict(api: Api, db_rows: Callable[..., dict]) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 5))
    before = db_rows()
    conflict = api.ingest_listandwatch(
        listandwatch("node-a", [dev("gpu-0", "Unhealthy")], 5), expect=409
    )
    assert conflict["error"]["code"] == "conflicting_repeat"
    assert conflict["error"]["details"][0]["field"] == "source.seq"
    assert db_rows() == before


def test_new_boot_id_starts_a_new_sequence(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 100))
    result = api.ingest_listandwatch(
        listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1, boot="boot-b")
    )
    assert result["added"] == 1
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 0, boot="boot-b"), expect=409)
    assert (
        api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-1")], 2, boot="boot-b"))["removed"]
        == 1
    )


def booted(body: dict[str, Any], boot: str, started_at: str) -> dict[str, Any]:
    body["source"] = {**body["source"], "boot_id": boot, "boot_started_at": started_at}
    return body


def test_a_snapshot_of_an_older_boot_after_a_newer_boots_is_late_and_changes_nothing(
    api: Api, db_rows: Callable[..., dict]
) -> None:
    old, new = ("boot-old", "2026-12-01T10:00:00Z"), ("boot-new", "2026-12-01T11:00:00Z")
    api.ingest_listandwatch(booted(listandwatch("node-a", [dev("gpu-0")], 50), *old))
    newer = booted(listandwatch("node-a", [dev("gpu-0", "Unhealthy")], 1), *new)
    assert api.ingest_listandwatch(newer)["health_changes"] == 1
    holding = [pod("p", containers={"c": [held(GPU, "gpu-0")]})]
    api.ingest_podresources(booted(podresources("node-a", holding, 1), *new))
    before = db_rows(skip={"nodes": {"last_seen"}})

    # The old boot's agent, still running or retrying, sends after the new one.
    late = api.ingest_listandwatch(booted(listandwatch("node-a", [dev("gpu-0")], 51), *old))
    assert (late["late"], late["changed"], late["health_changes"]) == (True, False, 0)
    late_pr = api.ingest_podresources(booted(podresources("node-a", [], 51), *old))
    assert (late_pr["late"], late_pr["released"]) == (True, 0)
    assert db_rows(skip={"nodes": {"last_seen"}}) == before
    assert api.device("node-a", "gpu-0")["health"] == "Unhealthy"
    # The new boot goes on as before; so does a boot that began later still.
    assert (
        api.ingest_listandwatch(booted(listandwatch("node-a", [dev("gpu-0")], 2), *new))[
            "health_changes"
        ]
        == 1
    )
    later = booted(
        listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1), "boot-3", "2026-12-01T12:00:00Z"
    )
    assert api.ingest_listandwatch(later)["added"] == 1


def test_a_boot_that_does_not_say_when_it_began_starts_a_new_sequence_as_ever(api: Api) -> None:
    api.ingest_listandwatch(
        booted(listandwatch("node-a", [dev("gpu-0")], 5), "boot-new", "2026-12-01T11:00:00Z")
    )
    unstated = listandwatch("node-a", [dev("gpu-0", "Unhealthy")], 1, boot="boot-other")
    result = api.ingest_listandwatch(unstated)
    assert (result["late"], result["health_changes"]) == (False, 1)


def test_a_boot_start_that_is_not_a_time_is_422(api: Api) -> None:
    body = booted(listandwatch("node-a", [dev("gpu-0")], 1), "boot-a", "yesterday")
    response = api.post("/api/v1/ingest/listandwatch", body, expect=422)
    fields = [d["field"] for d in response.json()["error"]["details"]]
    assert "source.boot_started_at" in fields


def test_unchanged_snapshot_writes_nothing_but_last_seen(
    api: Api, db_rows: Callable[..., dict]
) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1))
    api.ingest_podresources(
        podresources("node-a", [pod("p", containers={"c": [held(GPU, "gpu-1")]})], 1)
    )
    [node_before] = api.get("/api/v1/nodes")["results"]
    # The receipt moves on to the new seq; everything else must stay as it was.
    skip = {"nodes": {"last_seen"}, "ingest_receipts": {"boot_id", "seq", "received_at"}}
    before = db_rows(skip=skip)

    result = api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 2))
    assert result == {
        "changed": False,
        "duplicate": False,
        "late": False,
        "added": 0,
        "removed": 0,
        "reappeared": 0,
        "health_changes": 0,
        "allocated": 0,
        "released": 0,
        "events": 0,
    }
    pr_result = api.ingest_podresources(
        podresources("node-a", [pod("p", containers={"c": [held(GPU, "gpu-1")]})], 2, boot="boot-2")
    )
    assert pr_result["changed"] is False and pr_result["events"] == 0

    assert db_rows(skip=skip) == before
    [node_after] = api.get("/api/v1/nodes")["results"]
    assert node_after["last_seen"] >= node_before["last_seen"]
    # A stale snapshot after the unchanged one is still refused: the receipt did advance.
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1), expect=409)


def test_camel_case_and_snake_case_bodies_are_both_accepted(api: Api) -> None:
    camel = {
        "node": "node-c",
        "source": {"bootId": "b", "seq": "1"},
        "observed_at": "2026-12-02T12:00:00+02:00",
        "podResources": [
            {
                "name": "p",
                "namespace": "ns",
                "containers": [
                    {
                        "name": "c",
                        "devices": [
                            {
                                "resourceName": GPU,
                                "deviceIds": ["g0"],
                                "topology": {"nodes": [{"ID": "1"}]},
                            }
                        ],
                        "cpuIds": ["2", "3"],
                        "memory": [{"memoryType": "memory", "size": "1024"}],
                    }
                ],
            }
        ],
        "allocatable": {"devices": [{"resourceName": GPU, "deviceIds": ["g0", "g1"]}]},
    }
    snake = {
        "node": "node-s",
        "source": {"boot_id": "b", "seq": 1},
        "observed_at": "2026-12-02T12:00:00Z",
        "pod_resources": [
            {
                "name": "p",
                "namespace": "ns",
                "containers": [
                    {
                        "name": "c",
                        "devices": [
                            {
                                "resource_name": GPU,
                                "device_ids": ["g0"],
                                "topology": {"nodes": [{"ID": 1}]},
                            }
                        ],
                        "cpu_ids": [2, 3],
                    }
                ],
            }
        ],
        "allocatable": {"devices": [{"resource_name": GPU, "device_ids": ["g0", "g1"]}]},
    }
    assert api.ingest_podresources(camel)["allocated"] == 1
    assert api.ingest_podresources(snake)["allocated"] == 1
    for node in ("node-c", "node-s"):
        devices = by_id(api.devices(node=node))
        assert sorted(devices) == ["g0", "g1"]
        assert devices["g0"]["numa_nodes"] == [1]
        assert devices["g0"]["allocation"]["pod"] == "p"
        detail = api.get(f"/api/v1/nodes/{node}")
        assert detail["kubelet_allocatable"] == {GPU: ["g0", "g1"]}


def test_grpcurl_listandwatch_output_with_string_numa_ids(api: Api) -> None:
    body = listandwatch(
        "node-g",
        [{"ID": "gpu-0", "health": "Healthy", "topology": {"nodes": [{"ID": "0"}, {"ID": "1"}]}}],
        1,
        plugin={
            "endpoint": "gpu.sock",
            "version": "v1beta1",
            "options": {"getPreferredAllocationAvailable": True},
        },
    )
    api.ingest_listandwatch(body)
    assert api.devices(node="node-g")[0]["numa_nodes"] == [0, 1]
    [plugin] = api.get("/api/v1/nodes/node-g")["plugins"]
    assert (plugin["resource"], plugin["endpoint"], plugin["api_version"]) == (
        GPU,
        "gpu.sock",
        "v1beta1",
    )
    assert plugin["options"]["get_preferred_allocation_available"] is True
    assert kinds(api, kind="plugin_registered")["plugin_registered"] == 1


# One claim's resources as the kubelet lists them under a container's dynamicResources.
GPU_CLAIM: dict[str, Any] = {
    "claimName": "gpu-claim",
    "claimNamespace": "serving",
    "claimResources": [
        {
            "cdiDevices": [{"name": "vendor.com/gpu=gpu3"}],
            "driverName": "gpu.vendor.com",
            "poolName": "node-d",
            "deviceName": "gpu-3",
        }
    ],
}


def test_dra_dynamic_resources_are_kept_and_shown_on_the_pod(api: Api) -> None:
    dra_pod = {
        "name": "infer",
        "namespace": "serving",
        "containers": [
            {
                "name": "main",
                "devices": [],
                "dynamicResources": [GPU_CLAIM],
            }
        ],
    }
    result = api.ingest_podresources(podresources("node-d", [dra_pod], 1))
    assert result["allocated"] == 1
    got = api.get("/api/v1/pods/serving/infer")
    assert got["node"] == "node-d"
    [claim] = got["containers"][0]["claims"]
    assert claim == {
        "claim": "serving/gpu-claim",
        "driver": "gpu.vendor.com",
        "pool": "node-d",
        "device": "gpu-3",
        "share_id": None,
        "cdi_devices": ["vendor.com/gpu=gpu3"],
        "started": claim["started"],
        "ended": None,
    }
    assert [p["name"] for p in api.get("/api/v1/pods")["results"]] == ["infer"]

    assert api.ingest_podresources(podresources("node-d", [], 2))["released"] == 1
    [claim] = api.get("/api/v1/pods/serving/infer")["containers"][0]["claims"]
    assert claim["ended"] is not None


def test_response_counts_what_changed(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("a"), dev("b"), dev("c")], 1))
    api.ingest_listandwatch(listandwatch("node-a", [dev("a")], 2))
    result = api.ingest_listandwatch(
        listandwatch("node-a", [dev("a", "Unhealthy"), dev("b"), dev("d")], 3)
    )
    assert {k: result[k] for k in ("added", "removed", "reappeared", "health_changes")} == {
        "added": 1,
        "removed": 0,
        "reappeared": 1,
        "health_changes": 1,
    }
    assert result["events"] == 3 and result["changed"] is True
    pr1 = api.ingest_podresources(
        podresources("node-a", [pod("p", containers={"c": [held(GPU, "a", "b")]})], 1)
    )
    assert (pr1["allocated"], pr1["released"]) == (2, 0)
    pr2 = api.ingest_podresources(
        podresources("node-a", [pod("p", containers={"c": [held(GPU, "b", "d")]})], 2)
    )
    assert (pr2["allocated"], pr2["released"]) == (1, 1)


def test_every_change_is_an_event_with_the_actor(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 1, boot=BOOT))
    events = api.events()
    assert {e["kind"] for e in events} == {"node_added", "device_added"}
    assert {e["actor"] for e in events} == {"tester@node-a"}
    added = next(e for e in events if e["kind"] == "device_added")
    assert (added["node"], added["resource"], added["device_id"]) == ("node-a", GPU, "gpu-0")
    assert added["after"]["health"] == "Healthy"


def test_the_content_hash_reads_a_snapshot_as_its_full_dump_does() -> None:
    # The hash of every applied snapshot is stored: if the content it covers changed shape, no
    # stored snapshot would match its next unchanged repeat, and a retried seq would be a 409.
    container = {
        "name": "main",
        "devices": [held(GPU, "gpu-0", "gpu-1", numa=[1, 0]), held(NIC, "nic-0")],
        "dynamicResources": [
            {**GPU_CLAIM, "claimResources": [{**GPU_CLAIM["claimResources"][0], "shareId": "s-1"}]}
        ],
    }
    snapshot = PodResourcesSnapshot.model_validate(
        podresources(
            "node-d",
            [{**pod("infer", uid="u-1"), "containers": [container]}, pod("idle")],
            1,
            allocatable={"devices": [held(GPU, "gpu-0", "gpu-1", numa=[0]), held(NIC, "nic-0")]},
        )
    )
    for p in snapshot.pod_resources:
        for c in p.containers:
            assert container_content(c) == c.model_dump()
    assert snapshot.allocatable is not None
    for entry in snapshot.allocatable.devices:
        assert devices_content(entry) == entry.model_dump()


def dumped_hash(snapshot: PodResourcesSnapshot) -> str:
    """The content hash as the standard library serialises the full dump, key order sorted."""
    content = {
        "pods": sorted(
            (p.namespace, p.name, p.uid, [c.model_dump() for c in p.containers])
            for p in snapshot.pod_resources
        ),
        "allocatable": snapshot.allocatable.model_dump() if snapshot.allocatable else None,
    }
    encoded = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(encoded.encode()).hexdigest()


def test_the_content_hash_is_the_standard_librarys_serialisation_of_the_dump() -> None:
    # Stored hashes must keep matching whatever serialises the content: plain ASCII, and text
    # the standard library escapes (other characters, DEL).
    claim = {**GPU_CLAIM["claimResources"][0], "shareId": "s-1", "cdiDevices": [{"name": "c"}]}
    container = {
        "name": "main",
        "devices": [held(GPU, "gpu-0", "gpu-1", numa=[1, 0])],
        "dynamicResources": [{**GPU_CLAIM, "claimResources": [claim]}],
    }
    for uid, device_id in (("u-1", "nic-0"), ("u-\x7f", "nic-0"), ("u-1", "nic-\u00e9")):
        snapshot = PodResourcesSnapshot.model_validate(
            podresources(
                "node-d",
                [
                    {**pod("infer", uid=uid), "containers": [container]},
                    pod("idle", containers={"main": [held(NIC, device_id)]}),
                ],
                1,
                allocatable={"devices": [held(GPU, "gpu-0", "gpu-1"), held(NIC, device_id)]},
            )
        )
        assert snapshot.content_hash() == dumped_hash(snapshot), (uid, device_id)
    no_allocatable = PodResourcesSnapshot.model_validate(podresources("node-d", [pod("a")], 1))
    assert no_allocatable.content_hash() == dumped_hash(no_allocatable)


def listandwatch_dumped_hash(snapshot: ListAndWatchSnapshot) -> str:
    """A ListAndWatch snapshot's content hash as the standard library serialises it."""
    content = {
        "plugin": snapshot.plugin.model_dump() if snapshot.plugin else None,
        "health_source": snapshot.health_source,
        "devices": sorted(
            (d.ID, d.health, sorted({n.ID for n in d.topology.nodes}) if d.topology else [])
            for d in snapshot.devices
        ),
    }
    encoded = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(encoded.encode()).hexdigest()


def test_the_listandwatch_content_hash_is_the_standard_librarys_serialisation() -> None:
    plugin = {
        "endpoint": "gpu.sock",
        "version": "v1beta1",
        "options": {"getPreferredAllocationAvailable": True},
    }
    for device_id, extra in (
        ("gpu-1", {}),
        ("gpu-1", {"plugin": plugin}),
        # Characters JSON must escape, and other unusual ones.
        ('gpu-"1\\', {"plugin": plugin}),
        ("gpu-\u00e9", {"health_source": "derived"}),
        ("gpu-<1>&", {}),
    ):
        devices = [dev("gpu-0", numa=[1, 0, 1]), dev(device_id, "Unhealthy", numa=[0]), dev("x")]
        snapshot = ListAndWatchSnapshot.model_validate(listandwatch("node-d", devices, 1, **extra))
        assert snapshot.content_hash() == listandwatch_dumped_hash(snapshot), device_id


def test_each_new_device_keeps_its_own_added_event_in_the_snapshots_order(api: Api) -> None:
    """A new node's devices and their device_added events come in one statement: the events
    keep the snapshot's order, and each device's history holds its own event, whatever order
    the database matched them in."""
    listed = [f"gpu-{i}" for i in (3, 0, 7, 1, 5, 2, 6, 4)]
    health = {"gpu-7": "Unhealthy", "gpu-2": "Unhealthy"}
    devices = [dev(device_id, health.get(device_id, "Healthy")) for device_id in listed]
    api.ingest_listandwatch(listandwatch("node-new", devices, 1))
    added = api.get("/api/v1/events", kind="device_added", node="node-new", limit=100)["results"]
    assert [e["device_id"] for e in reversed(added)] == listed
    for device in api.devices(node="node-new"):
        history = api.get(f"/api/v1/devices/{device['id']}")["health_history"]
        assert [(h["kind"], h["health"]) for h in history] == [
            ("device_added", health.get(device["device_id"], "Healthy"))
        ], device["device_id"]
