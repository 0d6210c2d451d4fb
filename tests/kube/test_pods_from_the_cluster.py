"""What the cluster adds to pods: a pod holding devices only through ResourceClaims the API
server allocated (no node agent reports them) is listed, answered and shown like any other,
with its devices' health while held; and each pod carries its owner."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from ui.dom import parse

from .conftest import Factory, StartApp, ingest_allocations, ingest_devices, wait_for
from .dra_builders import DRIVER, claim_object, device, dra_pod, result, slice_object
from .fake_apiserver import FakeApiServer
from .objects import node, pod

GPU = "example.com/gpu"


def _json(client: TestClient, auth: dict[str, str], path: str) -> Any:
    response = client.get(path, headers=auth)
    return response.json() if response.status_code == 200 else None


def _broken_gpu_claim(reserved_for: list[tuple[str, str]]) -> dict[str, Any]:
    ready_false = {
        "type": "Ready",
        "status": "False",
        "reason": "XidError",
        "message": "driver says XidError",
        "lastTransitionTime": "2026-12-03T10:00:00Z",
    }
    return claim_object(
        "ml",
        "inference-gpu",
        [result("gpu-1", pool="node-a")],
        reserved_for=reserved_for,
        devices_status=[
            {"driver": DRIVER, "pool": "node-a", "device": "gpu-1", "conditions": [ready_false]}
        ],
    )


def test_a_pod_holding_devices_only_through_cluster_claims_is_a_pod(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    fake_api.put("nodes", node("node-a", capacity={}))
    fake_api.put(
        "resourceslices",
        slice_object(
            "node-a-gpus",
            [device("gpu-0"), device("gpu-1")],
            pool="node-a",
            nodeName="node-a",
        ),
    )
    fake_api.put(
        "pods",
        dra_pod(
            "ml",
            "inference",
            node_name="node-a",
            uid="uid-inference",
            claims=[{"name": "gpu", "resourceClaimName": "inference-gpu"}],
        ),
    )
    fake_api.put("resourceclaims", _broken_gpu_claim([("inference", "uid-inference")]))
    client = start_app()

    detail = wait_for(
        lambda: (
            (p := _json(client, auth, "/api/v1/pods/ml/inference"))
            and p["unhealthy_while_held"]
            and p
        ),
        what="the pod, holding its claim's Unhealthy GPU",
    )
    assert (detail["running"], detail["node"], detail["uid"]) == (True, "node-a", "uid-inference")
    (hold,) = detail["dra_holds"]
    assert (hold["device"], hold["claim"], hold["ended"]) == ("gpu-1", "inference-gpu", None)
    assert hold["health_during"][-1]["health"] == "Unhealthy"

    listed = _json(client, auth, "/api/v1/pods?namespace=ml")["results"]
    assert [(p["name"], p["running"], p["node"]) for p in listed] == [("inference", True, "node-a")]
    assert [(d["device"], d["health"]) for d in listed[0]["dra_devices"]] == [
        ("gpu-1", "Unhealthy")
    ]
    assert _json(client, auth, "/api/v1/pods?state=finished&namespace=ml")["results"] == []

    page = parse(client.get("/pods/ml/inference", headers=auth).text)
    verdict = page.one("div", class_="notice notice-error verdict")
    assert "A device was unhealthy while this pod held it" in verdict.clean_text
    assert "gpu-1" in verdict.clean_text
    assert page.one("div", class_="timeline pod-timeline").find_all("a")[0].text == "gpu-1"
    listing = parse(client.get("/pods", headers=auth).text).by_id("pod-results")
    assert [p.attrs["data-pod"] for p in listing.find_all("tbody", class_="pod")] == [
        "ml/inference"
    ]

    # Deleted, it no longer holds the GPU: the claim's reservation is gone with it.
    fake_api.delete("pods", "inference", namespace="ml")
    fake_api.put("resourceclaims", _broken_gpu_claim([]))
    wait_for(
        lambda: _json(client, auth, "/api/v1/pods?namespace=ml")["results"] == [],
        what="the deleted pod to leave the list",
    )


def test_pods_carry_their_owner_from_the_cluster(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str], session_factory: Factory
) -> None:
    ingest_devices(session_factory, "node-a", GPU, {"gpu-0": "Healthy"})
    ingest_allocations(session_factory, "node-a", [("ml", "train-x7", GPU, ["gpu-0"])])
    fake_api.put("nodes", node("node-a", capacity={GPU: "1"}))
    fake_api.put(
        "pods",
        pod(
            "ml",
            "train-x7",
            node_name="node-a",
            limits={GPU: "1"},
            uid="uid-train-x7",
            owner=("Job", "train"),
        ),
    )
    client = start_app()
    listed = wait_for(
        lambda: (
            (r := _json(client, auth, "/api/v1/pods?namespace=ml")) and r["results"][0]["owner"]
        ),
        what="the pod's owner",
    )
    assert listed == {"kind": "Job", "name": "train"}
    assert _json(client, auth, "/api/v1/pods/ml/train-x7")["owner"] == listed
    row = parse(client.get("/pods", headers=auth).text).one("td", class_="pod-owner")
    assert row.clean_text == "Job train"
