"""The simulated DRA driver writes its node's GPUs and the claims using them to the simulated
API server over HTTP; the service, watching that API server, shows them as DRA devices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from devicedeck.sim.dra_driver import DRIVER, DraDriverSpec, SimDraDriver
from devicedeck.sim.kubeclient import KubeClient

from .conftest import StartApp, wait_for
from .fake_apiserver import FakeApiServer
from .objects import node


def _devices(client: TestClient, auth: dict[str, str]) -> dict[str, dict[str, Any]]:
    response = client.get("/api/v1/dra/devices?node=gpu-a", headers=auth)
    assert response.status_code == 200, response.text
    return {d["device"]: d for d in response.json()["results"]}


def _cluster_pods(client: TestClient, auth: dict[str, str]) -> dict[str, dict[str, Any]]:
    response = client.get("/api/v1/cluster/pods?namespace=ml", headers=auth)
    assert response.status_code == 200, response.text
    return {p["name"]: p for p in response.json()["results"]}


def test_sim_driver_publishes_a_pool_a_template_claim_a_broken_gpu_and_a_monitor(
    fake_api: FakeApiServer, kubeconfig: Path, start_app: StartApp, auth: dict[str, str]
) -> None:
    fake_api.put("nodes", node("gpu-a", capacity={}))
    driver = SimDraDriver(KubeClient.from_kubeconfig(kubeconfig), DraDriverSpec("gpu-a", 4))
    driver.publish()
    # Publishing again (as the driver does every interval) changes nothing it already wrote.
    driver.publish()
    client = start_app()
    devices = wait_for(
        lambda: (
            (d := _devices(client, auth))
            and len(d) == 4
            and d["gpu-1"]["health"]
            and d["gpu-0"]["claims"]
            and d
        ),
        what="the simulated driver's four GPUs with their claims and health",
    )
    assert {d["driver"] for d in devices.values()} == {DRIVER}
    trainer = devices["gpu-0"]
    assert trainer["allocated"] is True
    assert trainer["claims"][0]["name"] == "trainer-gpu-a-gpu-sim01"
    assert trainer["claims"][0]["consumers"][0]["name"] == "trainer-gpu-a"
    assert devices["gpu-1"]["health"]["health"] == "Unhealthy"
    assert devices["gpu-1"]["health"]["source"] == "claim_status"
    # The monitor watches every GPU and allocates none: two stay free.
    assert all(d["watched_by"][0]["name"] == "gpu-monitor-gpu-a" for d in devices.values())
    assert sorted(n for n, d in devices.items() if not d["allocated"]) == ["gpu-2", "gpu-3"]
    # Pods come through a watch of their own, which may deliver after the claims' watch.
    by_name = wait_for(
        lambda: (
            (found := _cluster_pods(client, auth))
            and "trainer-gpu-a" in found
            and found["trainer-gpu-a"]["dra_devices"]
            and found
        ),
        what="the trainer pod with its claim",
    )
    assert by_name["trainer-gpu-a"]["claims"][0]["template"] == "one-gpu"
    assert by_name["trainer-gpu-a"]["claims"][0]["claim"] == "trainer-gpu-a-gpu-sim01"
    assert [d["device"] for d in by_name["trainer-gpu-a"]["dra_devices"]] == ["gpu-0"]
