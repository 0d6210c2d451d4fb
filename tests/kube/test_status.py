"""The watcher's status: RBAC denial and missing API groups are shown; the watcher keeps on."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from .conftest import StartApp, wait_for
from .fake_apiserver import FakeApiServer
from .objects import node, pod


def _status(client: TestClient, auth: dict[str, str]) -> dict[str, Any]:
    response = client.get("/api/v1/cluster/status", headers=auth)
    assert response.status_code == 200, response.text
    return response.json()


def _watch(client: TestClient, auth: dict[str, str], resource: str) -> dict[str, Any]:
    return next(w for w in _status(client, auth)["watches"] if w["resource"] == resource)


def _watch_state_samples(client: TestClient) -> dict[tuple[str, str], float]:
    """devicedeck_kube_watch_state from /metrics, as Prometheus would scrape it."""
    text = client.get("/metrics").text
    return {
        (sample.labels["resource"], sample.labels["state"]): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "devicedeck_kube_watch_state"
        for sample in family.samples
    }


def test_rbac_denial_is_shown_and_the_watch_recovers_when_allowed(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    fake_api.deny("pods")
    fake_api.put("nodes", node("node-a", capacity={"example.com/gpu": "1"}))
    fake_api.put(
        "pods", pod("ml", "trainer-0", node_name="node-a", limits={"example.com/gpu": "1"})
    )
    client = start_app()

    pods = wait_for(
        lambda: (w := _watch(client, auth, "pods"))["state"] == "forbidden" and w,
        what="the pods watch to report RBAC denial",
    )
    assert "403" in pods["message"] and "RBAC" in pods["message"]
    assert pods["errors"] >= 1
    assert pods["retry_at"] is not None
    wait_for(lambda: _watch(client, auth, "nodes")["state"] == "watching", what="nodes watching")
    assert _status(client, auth)["healthy"] is False
    # What the alert on a forbidden watch reads: one state at 1 per collection.
    states = wait_for(
        lambda: (m := _watch_state_samples(client)).get(("pods", "forbidden")) == 1.0 and m,
        what="the forbidden pods watch in /metrics",
    )
    assert states[("nodes", "watching")] == 1.0
    assert states[("nodes", "forbidden")] == 0.0
    assert sum(value for (resource, _), value in states.items() if resource == "pods") == 1.0

    fake_api.allow("pods")
    wait_for(lambda: _status(client, auth)["healthy"], what="recovery after backoff")
    assert _watch_state_samples(client)[("pods", "forbidden")] == 0.0
    listed = client.get("/api/v1/cluster/pods", headers=auth).json()
    assert [p["name"] for p in listed["results"]] == ["trainer-0"]


def test_a_cluster_without_dra_is_still_healthy(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]
) -> None:
    fake_api.stop_serving("resourceslices")
    fake_api.stop_serving("resourceclaims")
    client = start_app()
    status = wait_for(
        lambda: (s := _status(client, auth))["healthy"] and s, what="healthy without DRA"
    )
    states = {w["resource"]: w["state"] for w in status["watches"]}
    assert states == {
        "nodes": "watching",
        "pods": "watching",
        "resourceslices": "unavailable",
        "resourceclaims": "unavailable",
    }
    slices = next(w for w in status["watches"] if w["resource"] == "resourceslices")
    assert "resource.k8s.io (v1, v1beta2 or v1beta1)" in slices["message"]
    assert status["mode"] == "kubeconfig"
    assert status["enabled"] is True


def test_status_when_off(client: TestClient, auth: dict[str, str]) -> None:
    status = _status(client, auth)
    assert status["mode"] == "off"
    assert status["enabled"] is False
    assert "DEVICEDECK_KUBE" in status["problem"]
    assert _watch_state_samples(client) == {}
    assert status["watches"] == []
    assert client.get("/api/v1/cluster/status").status_code == 401


def test_a_bad_kubeconfig_is_reported(start_app: StartApp, auth: dict[str, str]) -> None:
    client = start_app(kubeconfig="/nonexistent/kubeconfig")
    status = _status(client, auth)
    assert status["healthy"] is False
    assert "/nonexistent/kubeconfig" in status["problem"]
