"""DRA allocation as the scheduler sees it, and pools and node selection as the API defines
them; over real HTTP from the fake API server to the service's JSON API."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from .conftest import StartApp, wait_for
from .dra_builders import claim_object, device, result, selector, slice_object
from .fake_apiserver import FakeApiServer
from .objects import node


def _devices(client: TestClient, auth: dict[str, str], query: str = "") -> list[dict[str, Any]]:
    response = client.get(f"/api/v1/dra/devices{query}", headers=auth)
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def _by_name(devices: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["device"]: d for d in devices}


def test_admin_access_watches_without_allocating(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    fake_api.put(
        "resourceslices",
        slice_object(
            "node-a-gpus", [device("gpu-0"), device("gpu-1")], pool="node-a", nodeName="node-a"
        ),
    )
    fake_api.put(
        "resourceclaims",
        claim_object(
            "monitoring",
            "dcgm-exporter-node-a",
            [result("gpu-0", pool="node-a", adminAccess=True)],
            reserved_for=[("dcgm-exporter-x1", "uid-dcgm")],
        ),
    )
    client = start_app()
    gpu0 = wait_for(
        lambda: _by_name(_devices(client, auth)).get("gpu-0", {}).get("watched_by") and True,
        what="the monitor's claim",
    )
    assert gpu0
    gpu0 = _by_name(_devices(client, auth))["gpu-0"]
    assert gpu0["allocated"] is False
    assert gpu0["claims"] == []
    (watcher,) = gpu0["watched_by"]
    assert (watcher["name"], watcher["admin_access"]) == ("dcgm-exporter-node-a", True)
    assert watcher["consumers"][0]["name"] == "dcgm-exporter-x1"
    # Free devices include the watched one: the scheduler can still give it to a workload.
    assert [d["device"] for d in _devices(client, auth, "?allocated=false")] == ["gpu-0", "gpu-1"]
    assert _devices(client, auth, "?allocated=true") == []

    # A workload claim on the same device allocates it; the monitor still watches.
    fake_api.put(
        "resourceclaims",
        claim_object(
            "ml", "trainer-gpu", [result("gpu-0", pool="node-a")], reserved_for=[("t", "uid-t")]
        ),
    )
    wait_for(
        lambda: [d["device"] for d in _devices(client, auth, "?allocated=true")] == ["gpu-0"],
        what="the workload's allocation",
    )
    gpu0 = _by_name(_devices(client, auth))["gpu-0"]
    assert [c["name"] for c in gpu0["claims"]] == ["trainer-gpu"]
    assert [c["name"] for c in gpu0["watched_by"]] == ["dcgm-exporter-node-a"]


def test_shared_device_shows_each_share_and_the_capacity_left(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    policy = {"default": "8Gi", "validRange": {"min": "8Gi", "max": "80Gi", "step": "8Gi"}}
    fake_api.put(
        "resourceslices",
        slice_object(
            "node-a-shared",
            [
                device(
                    "gpu-0",
                    allowMultipleAllocations=True,
                    capacity={
                        "memory": {"value": "80Gi", "requestPolicy": policy},
                        "cores": {"value": "100"},
                    },
                ),
                device("gpu-1", capacity={"memory": {"value": "80Gi"}}),
            ],
            pool="node-a",
            nodeName="node-a",
        ),
    )
    for name, share, memory, cores in (
        ("inference-a", "6a1e4c8e-0000-4000-8000-000000000001", "16Gi", "30"),
        ("inference-b", "6a1e4c8e-0000-4000-8000-000000000002", "24Gi", "20"),
    ):
        fake_api.put(
            "resourceclaims",
            claim_object(
                "serving",
                name,
                [
                    result(
                        "gpu-0",
                        pool="node-a",
                        shareID=share,
                        # The driver's own domain may be left out of a capacity name, or not.
                        consumedCapacity={"gpu.example.com/memory": memory, "cores": cores},
                    )
                ],
            ),
        )
    client = start_app()
    gpu0 = wait_for(
        lambda: (
            (d := _by_name(_devices(client, auth)).get("gpu-0")) and len(d["claims"]) == 2 and d
        ),
        what="two shares of gpu-0",
    )
    assert gpu0["shared"] is True
    assert gpu0["allocated"] is True
    assert [(c["name"], c["share_id"][-1]) for c in gpu0["claims"]] == [
        ("inference-a", "1"),
        ("inference-b", "2"),
    ]
    assert gpu0["claims"][0]["consumed_capacity"] == {
        "gpu.example.com/memory": "16Gi",
        "cores": "30",
    }
    assert gpu0["capacity"] == {
        "memory": {
            "value": "80Gi",
            "request_policy": policy,
            "consumed": "40Gi",
            "available": "40Gi",
        },
        "cores": {"value": "100", "request_policy": None, "consumed": "50", "available": "50"},
    }
    # A device that cannot be shared has the same capacity shape, without share accounting.
    assert _by_name(_devices(client, auth))["gpu-1"]["capacity"] == {
        "memory": {"value": "80Gi", "request_policy": None, "consumed": None, "available": None}
    }


def test_pools_newest_generation_per_slice_and_completeness(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    def gen(n: int, names: list[str], slice_name: str, count: int = 2) -> dict[str, Any]:
        return slice_object(
            slice_name,
            [device(d) for d in names],
            pool="rack-1",
            generation=n,
            count=count,
            allNodes=True,
        )

    fake_api.put("resourceslices", gen(1, ["fpga-0", "fpga-1"], "rack-1-a"))
    fake_api.put("resourceslices", gen(1, ["fpga-2"], "rack-1-b"))
    client = start_app()
    devices = wait_for(
        lambda: (d := _devices(client, auth)) and len(d) == 3 and d, what="generation 1"
    )
    assert {d["device"] for d in devices} == {"fpga-0", "fpga-1", "fpga-2"}
    assert devices[0]["pool_state"] == {
        "generation": 1,
        "slices": 2,
        "slice_count": 2,
        "complete": True,
    }

    # The driver starts generation 2 with an empty slice: the older devices no longer count,
    # and the pool is incomplete until its second slice arrives.
    fake_api.put("resourceslices", gen(2, [], "rack-1-a"))
    wait_for(lambda: _devices(client, auth) == [] and True, what="generation 2's empty slice")
    fake_api.put("resourceslices", gen(2, ["fpga-0"], "rack-1-b"))
    (fpga0,) = wait_for(lambda: _devices(client, auth), what="generation 2's device")
    assert fpga0["device"] == "fpga-0"
    assert fpga0["pool_state"] == {
        "generation": 2,
        "slices": 2,
        "slice_count": 2,
        "complete": True,
    }
    fake_api.put("resourceslices", gen(2, ["fpga-0"], "rack-1-b", count=3))
    wait_for(
        lambda: _devices(client, auth)[0]["pool_state"]["complete"] is False,
        what="the pool to be incomplete (2 of 3 slices)",
    )

    # A reset: the driver deletes the generation-2 slices and publishes generation 1 again.
    fake_api.delete("resourceslices", "rack-1-a")
    fake_api.delete("resourceslices", "rack-1-b")
    fake_api.put("resourceslices", gen(1, ["fpga-7"], "rack-1-c", count=1))
    (fpga7,) = wait_for(
        lambda: (d := _devices(client, auth)) and d[0]["device"] == "fpga-7" and d,
        what="the reset generation",
    )
    assert fpga7["pool_state"]["complete"] is True


def test_node_selection_puts_devices_on_every_node_they_serve(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    rack = {"kubernetes.io/hostname": "", "topology.example.com/rack": "r1"}
    fake_api.put(
        "nodes", node("node-a", capacity={}, labels={**rack, "kubernetes.io/hostname": "node-a"})
    )
    fake_api.put(
        "nodes", node("node-b", capacity={}, labels={**rack, "kubernetes.io/hostname": "node-b"})
    )
    fake_api.put("nodes", node("node-c", capacity={}, labels={"kubernetes.io/hostname": "node-c"}))
    fake_api.put(
        "resourceslices",
        slice_object(
            "rack-r1-fabric",
            [device("switch-0")],
            pool="rack-r1",
            nodeSelector=selector("topology.example.com/rack", "In", "r1"),
        ),
    )
    fake_api.put(
        "resourceslices",
        slice_object("cluster-licences", [device("licence-0")], pool="cluster", allNodes=True),
    )
    fake_api.put(
        "resourceslices",
        slice_object(
            "partitions",
            [
                device("part-a", nodeName="node-a"),
                device("part-c", nodeSelector=selector("kubernetes.io/hostname", "In", "node-c")),
                device("part-all", allNodes=True),
            ],
            pool="partitions",
            perDeviceNodeSelection=True,
        ),
    )
    client = start_app()

    def on(node_name: str) -> list[str]:
        return [d["device"] for d in _devices(client, auth, f"?node={node_name}")]

    wait_for(lambda: len(_devices(client, auth)) == 5, what="five devices")
    wait_for(lambda: "switch-0" in on("node-b"), what="node labels")
    assert on("node-a") == ["licence-0", "part-a", "part-all", "switch-0"]
    assert on("node-b") == ["licence-0", "part-all", "switch-0"]
    assert on("node-c") == ["licence-0", "part-all", "part-c"]
    devices = _by_name(_devices(client, auth))
    assert devices["switch-0"]["nodes"] == ["node-a", "node-b"]
    assert devices["switch-0"]["node"] is None
    assert devices["licence-0"]["all_nodes"] is True
    assert devices["part-a"]["nodes"] == ["node-a"]
    assert devices["part-c"]["nodes"] == ["node-c"]
    detail = client.get("/api/v1/nodes/node-b", headers=auth).json()
    assert [d["device"] for d in detail["dra_devices"]] == ["licence-0", "part-all", "switch-0"]
