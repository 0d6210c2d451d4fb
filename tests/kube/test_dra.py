"""DRA devices from ResourceSlices (highest pool generation) with their claims and pods."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from .conftest import StartApp, wait_for
from .fake_apiserver import FakeApiServer
from .objects import node, resource_claim, resource_slice

DRIVER = "gpu.example.com"


def _devices(client: TestClient, auth: dict[str, str], query: str = "") -> dict[str, Any]:
    response = client.get(f"/api/v1/dra/devices{query}", headers=auth)
    assert response.status_code == 200, response.text
    return response.json()


def _names(page: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(d["pool"], d["device"], d["pool_generation"]) for d in page["results"]]


def test_dra_devices_listed_from_the_highest_generation_with_consumers(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    fake_api.put("nodes", node("node-a", capacity={}))
    fake_api.put(
        "resourceslices",
        resource_slice(
            "node-a-gpu-old",
            driver=DRIVER,
            pool="node-a",
            generation=1,
            node_name="node-a",
            devices=["gpu-0", "gpu-1", "gpu-retired"],
        ),
    )
    fake_api.put(
        "resourceslices",
        resource_slice(
            "node-a-gpu",
            driver=DRIVER,
            pool="node-a",
            generation=2,
            node_name="node-a",
            devices=["gpu-0", "gpu-1"],
        ),
    )
    fake_api.put(
        "resourceslices",
        resource_slice(
            "shared", driver=DRIVER, pool="shared", generation=7, node_name=None, devices=["fpga-0"]
        ),
    )
    fake_api.put(
        "resourceclaims",
        resource_claim(
            "ml",
            "trainer-0-gpu",
            driver=DRIVER,
            pool="node-a",
            devices=["gpu-1"],
            reserved_for=[("trainer-0", "uid-trainer-0")],
        ),
    )
    client = start_app()

    page = wait_for(
        lambda: (
            (p := _devices(client, auth))
            and len(p["results"]) == 3
            and any(d["allocated"] for d in p["results"])
            and p
        ),
        what="three DRA devices of the newest generations, one allocated",
    )
    assert _names(page) == [("node-a", "gpu-0", 2), ("node-a", "gpu-1", 2), ("shared", "fpga-0", 7)]
    gpu1 = page["results"][1]
    assert gpu1["node"] == "node-a"
    assert gpu1["attributes"] == {"model": "LATEST-GPU-MODEL", "index": 1}
    assert gpu1["capacity"] == {
        "memory": {"value": "80Gi", "request_policy": None, "consumed": None, "available": None}
    }
    assert gpu1["allocated"] is True
    (claim,) = gpu1["claims"]
    assert (claim["namespace"], claim["name"], claim["request"]) == ("ml", "trainer-0-gpu", "gpu")
    assert claim["consumers"] == [
        {"namespace": "ml", "name": "trainer-0", "uid": "uid-trainer-0", "resource": "pods"}
    ]
    assert page["results"][0]["allocated"] is False
    assert page["results"][2]["node"] is None

    # Keyset pages cover every device once.
    first = _devices(client, auth, "?limit=2")
    assert first["next"] is not None
    rest = client.get(first["next"], headers=auth).json()
    assert _names(first) + _names(rest) == _names(page)
    assert rest["next"] is None
    assert _names(_devices(client, auth, "?allocated=true")) == [("node-a", "gpu-1", 2)]

    detail = client.get("/api/v1/nodes/node-a", headers=auth).json()
    # The allNodes device serves node-a too.
    assert [d["device"] for d in detail["dra_devices"]] == ["gpu-0", "gpu-1", "fpga-0"]

    # The driver withdraws generation 2: generation 1 is the newest again.
    fake_api.delete("resourceslices", "node-a-gpu")
    page = wait_for(
        lambda: (p := _devices(client, auth, "?node=node-a")) and len(p["results"]) == 4 and p,
        what="generation 1 devices",
    )
    assert [d["device"] for d in page["results"]] == ["gpu-0", "gpu-1", "gpu-retired", "fpga-0"]

    # A released claim no longer shows its consumer.
    fake_api.put(
        "resourceclaims",
        resource_claim(
            "ml", "trainer-0-gpu", driver=DRIVER, pool="node-a", devices=[], reserved_for=[]
        ),
    )
    wait_for(
        lambda: not _devices(client, auth, "?allocated=true")["results"],
        what="the claim's allocation to go",
    )


@pytest.mark.parametrize("version", ["v1beta2", "v1beta1"])
def test_older_clusters_serve_dra_in_beta_versions(
    version: str, fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    """1.32 serves resource.k8s.io/v1beta1 only, with a device's fields under `basic`;
    1.33 adds v1beta2, shaped like v1."""
    fake_api.serve_dra_only(version)
    fields = {
        "attributes": {"model": {"string": "OLDER-GPU"}},
        "capacity": {"memory": {"value": "40Gi"}},
    }
    gpu = {"name": "gpu-0", **({"basic": fields} if version == "v1beta1" else fields)}
    fake_api.put(
        "resourceslices",
        {
            "metadata": {"name": "node-a-gpus"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "node-a",
                "devices": [gpu],
            },
        },
    )
    fake_api.put(
        "resourceclaims",
        resource_claim(
            "ml", "old-claim", driver=DRIVER, pool="node-a", devices=["gpu-0"], reserved_for=[]
        ),
    )
    client = start_app()
    page = wait_for(
        lambda: (p := _devices(client, auth))["results"] and p["results"][0]["allocated"] and p,
        what=f"the device and its claim from {version}",
    )
    (device,) = page["results"]
    assert device["attributes"] == {"model": "OLDER-GPU"}
    assert device["capacity"]["memory"]["value"] == "40Gi"
    assert device["claims"][0]["name"] == "old-claim"
    # v1 was asked first and answered 404; the served version was read.
    assert fake_api.recorded("GET", "/apis/resource.k8s.io/v1/resourceslices")
    status = client.get("/api/v1/cluster/status", headers=auth).json()
    assert {w["resource"]: w["state"] for w in status["watches"]}["resourceslices"] == "watching"
