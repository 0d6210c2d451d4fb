"""Pods and their ResourceClaims by real name, and DRA device health with its provenance:
the claim's device conditions and KEP-4680 pod status, over real HTTP from the fake API server
(and the agent's PodResources snapshot) to the service's JSON API."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from devicedeck.clock import utcnow

from .conftest import StartApp, wait_for
from .dra_builders import DRIVER, claim_object, device, dra_pod, result, slice_object
from .fake_apiserver import FakeApiServer
from .objects import node

CDI_GPU1 = "gpu.example.com/gpu=gpu-1"
DEVICE_PAGE = f"/api/v1/dra/drivers/{DRIVER}/pools/node-a/devices"


def _pods(client: TestClient, auth: dict[str, str]) -> dict[str, dict[str, Any]]:
    response = client.get("/api/v1/cluster/pods", headers=auth)
    assert response.status_code == 200, response.text
    return {p["name"]: p for p in response.json()["results"]}


def _device(client: TestClient, auth: dict[str, str], name: str) -> dict[str, Any]:
    response = client.get(f"{DEVICE_PAGE}/{name}", headers=auth)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _known_device(client: TestClient, auth: dict[str, str], name: str) -> dict[str, Any] | None:
    """The device's answer, or None while the watch has not brought its slice in yet."""
    response = client.get(f"{DEVICE_PAGE}/{name}", headers=auth)
    if response.status_code == 404:
        return None
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _cluster(fake_api: FakeApiServer) -> None:
    fake_api.put("nodes", node("node-a", capacity={}))
    fake_api.put(
        "resourceslices",
        slice_object(
            "node-a-gpus",
            [device("gpu-0"), device("gpu-1"), device("gpu-2"), device("gpu-3")],
            pool="node-a",
            nodeName="node-a",
        ),
    )


def test_pods_name_their_real_claims_devices_and_sharers(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    _cluster(fake_api)
    # trainer-0's claim comes from a template: its name is only in the pod's status.
    fake_api.put(
        "pods",
        dra_pod(
            "ml",
            "trainer-0",
            node_name="node-a",
            uid="uid-trainer-0",
            claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            generated={"gpu": "trainer-0-gpu-x7k2p"},
        ),
    )
    fake_api.put(
        "resourceclaims",
        claim_object(
            "ml",
            "trainer-0-gpu-x7k2p",
            [result("gpu-1", pool="node-a")],
            reserved_for=[("trainer-0", "uid-trainer-0")],
        ),
    )
    # Two evaluators share one claim.
    for name in ("eval-0", "eval-1"):
        fake_api.put(
            "pods",
            dra_pod(
                "ml",
                name,
                node_name="node-a",
                uid=f"uid-{name}",
                claims=[{"name": "accel", "resourceClaimName": "eval-gpu"}],
            ),
        )
    fake_api.put(
        "resourceclaims",
        claim_object(
            "ml",
            "eval-gpu",
            [result("gpu-2", pool="node-a")],
            reserved_for=[("eval-0", "uid-eval-0"), ("eval-1", "uid-eval-1")],
        ),
    )
    # A template pod whose claim the controller has not made yet.
    fake_api.put(
        "pods",
        dra_pod(
            "ml",
            "trainer-1",
            node_name="node-a",
            uid="uid-trainer-1",
            claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        ),
    )
    client = start_app()
    pods = wait_for(
        lambda: (
            (p := _pods(client, auth))
            and len(p) == 4
            and p["trainer-0"]["dra_devices"]
            and p["eval-1"]["dra_devices"]
            and p
        ),
        what="four pods with their claims' devices",
    )
    trainer = pods["trainer-0"]
    assert trainer["claims"] == [
        {"name": "gpu", "claim": "trainer-0-gpu-x7k2p", "template": "one-gpu", "shared_with": []}
    ]
    assert trainer["dra_devices"] == [
        {
            "claim": "trainer-0-gpu-x7k2p",
            "request": "gpu",
            "driver": DRIVER,
            "pool": "node-a",
            "device": "gpu-1",
            "share_id": None,
            "admin_access": False,
            "health": None,
        }
    ]
    assert pods["eval-0"]["claims"][0]["shared_with"] == ["eval-1"]
    assert pods["eval-1"]["claims"][0]["shared_with"] == ["eval-0"]
    assert [d["device"] for d in pods["eval-0"]["dra_devices"]] == ["gpu-2"]
    assert pods["trainer-1"]["claims"] == [
        {"name": "gpu", "claim": None, "template": "one-gpu", "shared_with": []}
    ]
    assert pods["trainer-1"]["dra_devices"] == []


def test_claim_device_conditions_set_health_with_history(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    _cluster(fake_api)

    def claim(ready: str, reason: str) -> dict[str, Any]:
        return claim_object(
            "ml",
            "trainer-0-gpu",
            [result("gpu-0", pool="node-a")],
            devices_status=[
                {
                    "driver": DRIVER,
                    "pool": "node-a",
                    "device": "gpu-0",
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": ready,
                            "reason": reason,
                            "message": f"driver says {reason}",
                            "lastTransitionTime": "2026-12-03T10:00:00Z",
                        }
                    ],
                }
            ],
        )

    fake_api.put("resourceclaims", claim("False", "XidError"))
    client = start_app()
    page = wait_for(
        lambda: (d := _known_device(client, auth, "gpu-0")) and d["health"] and d["current"] and d,
        what="gpu-0's health and its claim",
    )
    assert page["health"]["health"] == "Unhealthy"
    assert page["health"]["source"] == "claim_status"
    assert page["health"]["reported_by"] == "ml/trainer-0-gpu"
    assert page["health"]["raw_health"] == "Ready=False (XidError)"
    assert page["health"]["message"] == "driver says XidError"
    (condition,) = page["current"]["claims"][0]["conditions"]
    assert condition["reason"] == "XidError"
    listed = client.get("/api/v1/dra/devices", headers=auth).json()["results"]
    assert listed[0]["health"]["health"] == "Unhealthy"

    def named(query: str) -> list[str]:
        response = client.get(f"/api/v1/dra/devices?{query}", headers=auth)
        assert response.status_code == 200, response.text
        return [d["device"] for d in response.json()["results"]]

    assert named("health=Unhealthy") == ["gpu-0"]
    assert named("health=Healthy") == []
    assert named("health=Unknown") == ["gpu-1", "gpu-2", "gpu-3"]
    bad = client.get("/api/v1/dra/devices?health=Broken", headers=auth)
    assert bad.status_code == 422
    assert bad.json()["error"]["details"][0]["field"] == "health"

    fake_api.put("resourceclaims", claim("True", "Recovered"))
    page = wait_for(
        lambda: (
            (d := _known_device(client, auth, "gpu-0"))
            and (d["health"] or {}).get("health") == "Healthy"
            and d
        ),
        what="gpu-0 healthy again",
    )
    assert [(h["before"], h["health"]) for h in page["health_history"]] == [
        ("Unhealthy", "Healthy"),
        (None, "Unhealthy"),
    ]
    # The change log has them too.
    events = client.get("/api/v1/events?kind=dra_health_changed", headers=auth).json()
    assert [e["device_id"] for e in events["results"]] == [f"{DRIVER}/node-a/gpu-0"] * 2
    # A device never seen is a 404 naming it.
    missing = client.get(f"{DEVICE_PAGE}/gpu-9", headers=auth)
    assert missing.status_code == 404
    assert "gpu-9" in missing.json()["error"]["message"]


def test_pod_status_health_maps_cdi_ids_and_device_names(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    _cluster(fake_api)
    claims = [
        {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
        {"name": "pair", "resourceClaimName": "pair-claim"},
    ]
    generated = {"gpu": "trainer-0-gpu-x7k2p"}
    fake_api.put(
        "resourceclaims",
        claim_object(
            "ml",
            "trainer-0-gpu-x7k2p",
            # Two devices for one request: only the CDI ID tells which one is meant.
            [result("gpu-1", pool="node-a"), result("gpu-3", pool="node-a")],
            reserved_for=[("trainer-0", "uid-trainer-0")],
        ),
    )
    fake_api.put(
        "resourceclaims",
        claim_object(
            "ml",
            "pair-claim",
            [
                result("gpu-0", pool="node-a", request="left"),
                result("gpu-2", pool="node-a", request="right"),
            ],
            reserved_for=[("trainer-0", "uid-trainer-0")],
        ),
    )

    def pod(health: dict[str, dict[str, str]] | None) -> dict[str, Any]:
        return dra_pod(
            "ml",
            "trainer-0",
            node_name="node-a",
            uid="uid-trainer-0",
            claims=claims,
            generated=generated,
            health=health,
        )

    fake_api.put("pods", pod(None))
    client = start_app()
    # The agent's PodResources snapshot gives the CDI device ID of each DRA device.
    snapshot = {
        "node": "node-a",
        "source": {"boot_id": "boot-1", "seq": 1},
        "observed_at": utcnow().isoformat(),
        "pod_resources": [
            {
                "namespace": "ml",
                "name": "trainer-0",
                "containers": [
                    {
                        "name": "main",
                        "dynamic_resources": [
                            {
                                "claim_name": "trainer-0-gpu-x7k2p",
                                "claim_namespace": "ml",
                                "claim_resources": [
                                    {
                                        "cdi_devices": [{"name": CDI_GPU1}],
                                        "driver_name": DRIVER,
                                        "pool_name": "node-a",
                                        "device_name": "gpu-1",
                                    }
                                ],
                            }
                        ],
                    }
                ],
            }
        ],
    }
    response = client.post("/api/v1/ingest/podresources", json=snapshot, headers=auth)
    assert response.status_code == 200, response.text
    wait_for(lambda: _pods(client, auth).get("trainer-0"), what="the pod")
    wait_for(lambda: len(_pods(client, auth)["trainer-0"]["dra_devices"]) == 4, what="its claims")

    # claim:gpu names no request: the kubelet's ID is the CDI device ID PodResources gave.
    # claim:pair/right names the request, and its ID is driver/pool/device (no CDI ID).
    fake_api.put(
        "pods",
        pod(
            {
                "claim:gpu": {CDI_GPU1: "Unhealthy"},
                "claim:pair/right": {f"{DRIVER}/node-a/gpu-2": "Unhealthy"},
                "claim:pair/left": {f"{DRIVER}/node-a/gpu-0": "Unknown"},
            }
        ),
    )
    gpu1 = wait_for(
        lambda: (d := _known_device(client, auth, "gpu-1")) and d["health"] and d,
        what="gpu-1's health",
    )
    assert gpu1["health"]["health"] == "Unhealthy"
    assert gpu1["health"]["source"] == "pod_status"
    assert gpu1["health"]["reported_by"] == "ml/trainer-0"
    assert gpu1["allocation_history"][0]["pod"] == "trainer-0"
    assert gpu1["allocation_history"][0]["claim"] == "ml/trainer-0-gpu-x7k2p"
    assert gpu1["allocation_history"][0]["ended"] is None
    gpu2 = wait_for(
        lambda: (d := _known_device(client, auth, "gpu-2")) and d["health"] and d,
        what="gpu-2's health",
    )
    assert gpu2["health"]["health"] == "Unhealthy"
    # "Unknown" is the kubelet not knowing: it sets nothing.
    assert _device(client, auth, "gpu-0")["health"] is None
    pods = _pods(client, auth)
    health = {d["device"]: d["health"] for d in pods["trainer-0"]["dra_devices"]}
    assert health == {"gpu-0": None, "gpu-1": "Unhealthy", "gpu-2": "Unhealthy", "gpu-3": None}
