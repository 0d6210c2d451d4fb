"""DRA health from the drivers' health streams (DRAResourceHealth/NodeWatchResources), as node
agents post it to /api/v1/ingest/dra-health: into the device's health and history, validated,
all or nothing, and node-bound."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from ui.dom import parse

from .conftest import StartApp, wait_for
from .dra_builders import DRIVER, claim_object, device, result, slice_object
from .fake_apiserver import FakeApiServer
from .objects import node

INGEST = "/api/v1/ingest/dra-health"
DEVICES = f"/api/v1/dra/drivers/{DRIVER}/pools/node-a/devices"


def _cluster(fake_api: FakeApiServer) -> None:
    for name in ("node-a", "node-b"):
        fake_api.put("nodes", node(name, capacity={}))
        fake_api.put(
            "resourceslices",
            slice_object(
                f"{name}-gpus",
                [device(f"gpu-{i}") for i in range(4)],
                pool=name,
                nodeName=name,
            ),
        )


def _entry(name: str, health: str | None, pool: str = "node-a", **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"device": {"poolName": pool, "deviceName": name}, **extra}
    if health is not None:
        entry["health"] = health
    return entry


def _report(devices: list[dict[str, Any]], node_name: str = "node-a") -> dict[str, Any]:
    return {
        "node": node_name,
        "driver": DRIVER,
        "observed_at": "2026-12-03T12:00:00Z",
        "devices": devices,
    }


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _device(client: TestClient, auth: dict[str, str], name: str, pool: str = "node-a") -> Any:
    response = client.get(f"/api/v1/dra/drivers/{DRIVER}/pools/{pool}/devices/{name}", headers=auth)
    assert response.status_code == 200, response.text
    return response.json()


def _started(fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]) -> TestClient:
    _cluster(fake_api)
    client = start_app()
    wait_for(
        lambda: len(client.get("/api/v1/dra/devices", headers=auth).json()["results"]) == 8,
        what="both nodes' slices",
    )
    return client


def test_stream_reports_become_health_with_history(
    fake_api: FakeApiServer,
    start_app: StartApp,
    auth: dict[str, str],
    make_token: Callable[..., str],
) -> None:
    client = _started(fake_api, start_app, auth)
    agent = _bearer(make_token("ingest", name="agent-a", node="node-a"))
    body = _report(
        [
            _entry("gpu-0", "HEALTHY", lastUpdatedTime="1764763200"),
            _entry(
                "gpu-1",
                "UNHEALTHY",
                lastUpdatedTime="1764763200",
                healthCheckTimeoutSeconds="60",
                message="Xid 79: GPU has fallen off the bus",
            ),
            # UNKNOWN is proto3's zero value: the printer leaves it out.
            _entry("gpu-2", None),
        ]
    )
    first = client.post(INGEST, json=body, headers=agent)
    assert first.status_code == 200, first.text
    assert first.json() == {
        "changed": True,
        "devices": 3,
        "health_changes": 3,
        "unpublished": [],
        "late": [],
    }

    gpu1 = _device(client, auth, "gpu-1")
    assert gpu1["health"]["health"] == "Unhealthy"
    assert gpu1["health"]["source"] == "kubelet_dra_health"
    assert gpu1["health"]["raw_health"] == "UNHEALTHY"
    assert gpu1["health"]["reported_by"] == "node-a"
    assert gpu1["health"]["message"] == "Xid 79: GPU has fallen off the bus"
    assert gpu1["health_stream"]["checked_at"] == "2025-12-03T12:00:00+00:00"
    assert gpu1["health_stream"]["timeout_seconds"] == 60
    (event,) = gpu1["health_history"]
    assert (event["health"], event["source"], event["node"]) == (
        "Unhealthy",
        "kubelet_dra_health",
        "node-a",
    )
    assert _device(client, auth, "gpu-2")["health"]["health"] == "Unknown"

    def named(query: str) -> list[str]:
        response = client.get(f"/api/v1/dra/devices?node=node-a&{query}", headers=auth)
        assert response.status_code == 200, response.text
        return [d["device"] for d in response.json()["results"]]

    # gpu-3 has no report at all; gpu-2's driver says it cannot tell: both are Unknown.
    assert named("health=Unknown") == ["gpu-2", "gpu-3"]
    assert named("health=Unhealthy") == ["gpu-1"]

    # The same message again changes nothing.
    again = client.post(INGEST, json=body, headers=agent)
    assert again.json()["changed"] is False and again.json()["health_changes"] == 0
    assert len(_device(client, auth, "gpu-1")["health_history"]) == 1

    # gpu-1 recovers: the stream's change is a new entry in its history.
    body["devices"][1] = _entry("gpu-1", "HEALTHY", lastUpdatedTime="1764763260")
    recovered = client.post(INGEST, json=body, headers=agent)
    assert recovered.json()["health_changes"] == 1
    history = _device(client, auth, "gpu-1")["health_history"]
    assert [(h["health"], h["before"]) for h in history] == [
        ("Healthy", "Unhealthy"),
        ("Unhealthy", None),
    ]


def test_a_repeated_stream_does_not_undo_a_newer_report_of_another_source(
    fake_api: FakeApiServer,
    start_app: StartApp,
    auth: dict[str, str],
    make_token: Callable[..., str],
) -> None:
    client = _started(fake_api, start_app, auth)
    agent = _bearer(make_token("ingest", name="agent-a", node="node-a"))
    body = _report([_entry("gpu-0", "HEALTHY")])
    assert client.post(INGEST, json=body, headers=agent).status_code == 200
    fake_api.put(
        "resourceclaims",
        claim_object(
            "ml",
            "trainer-0-gpu",
            [result("gpu-0", pool="node-a")],
            devices_status=[
                {
                    "driver": DRIVER,
                    "pool": "node-a",
                    "device": "gpu-0",
                    "conditions": [{"type": "Ready", "status": "False", "reason": "XidError"}],
                }
            ],
        ),
    )
    wait_for(
        lambda: _device(client, auth, "gpu-0")["health"]["source"] == "claim_status",
        what="the claim's condition",
    )
    # The agent's heartbeat sends the stream's unchanged state again.
    assert client.post(INGEST, json=body, headers=agent).json()["health_changes"] == 0
    health = _device(client, auth, "gpu-0")["health"]
    assert (health["health"], health["source"]) == ("Unhealthy", "claim_status")


def test_devices_no_slice_publishes_are_kept_and_named(
    fake_api: FakeApiServer,
    start_app: StartApp,
    auth: dict[str, str],
    make_token: Callable[..., str],
) -> None:
    client = _started(fake_api, start_app, auth)
    agent = _bearer(make_token("ingest", name="agent-a", node="node-a"))
    body = _report([_entry("gpu-0", "HEALTHY"), _entry("gpu-9", "UNHEALTHY")])
    response = client.post(INGEST, json=body, headers=agent)
    assert response.status_code == 200, response.text
    assert response.json()["unpublished"] == ["node-a/gpu-9"]
    page = _device(client, auth, "gpu-9")
    assert page["published"] is False and page["current"] is None
    assert page["health"]["health"] == "Unhealthy"
    assert page["health_history"][0]["node"] == "node-a"


def test_an_unpublished_device_of_a_pool_published_for_another_node_is_refused(
    fake_api: FakeApiServer,
    start_app: StartApp,
    auth: dict[str, str],
    make_token: Callable[..., str],
) -> None:
    client = _started(fake_api, start_app, auth)
    agent = _bearer(make_token("ingest", name="agent-a", node="node-a"))
    body = _report([_entry("gpu-0", "HEALTHY"), _entry("gpu-9", "UNHEALTHY", pool="node-b")])
    response = client.post(INGEST, json=body, headers=agent)
    assert response.status_code == 422, response.text
    (detail,) = response.json()["error"]["details"]
    assert (detail["field"], detail["rule"]) == ("devices[1].device", "other_node")
    assert "pool node-b" in detail["message"] and "node node-b" in detail["message"]
    assert _device(client, auth, "gpu-0")["health"] is None
    # Nothing was recorded of it: the service knows no such device.
    unknown = client.get(f"/api/v1/dra/drivers/{DRIVER}/pools/node-b/devices/gpu-9", headers=auth)
    assert unknown.status_code == 404


def test_without_the_cluster_a_device_on_record_for_another_node_is_refused(
    client: TestClient, auth: dict[str, str], make_token: Callable[..., str]
) -> None:
    """With DEVICEDECK_KUBE=off no slice publishes anything: what node-b's agent reported is
    node-b's, and node-a's agent can change none of it, nor add to its pool."""
    agent_b = _bearer(make_token("ingest", name="agent-b", node="node-b"))
    agent_a = _bearer(make_token("ingest", name="agent-a", node="node-a"))
    own = _report([_entry("gpu-3", "HEALTHY", pool="node-b")], node_name="node-b")
    assert client.post(INGEST, json=own, headers=agent_b).status_code == 200
    for name in ("gpu-3", "gpu-4"):
        foreign = _report([_entry(name, "UNHEALTHY", pool="node-b")])
        response = client.post(INGEST, json=foreign, headers=agent_a)
        assert response.status_code == 422, response.text
        (detail,) = response.json()["error"]["details"]
        assert (detail["field"], detail["rule"]) == ("devices[0].device", "other_node")
        assert "node-b" in detail["message"]
    health = _device(client, auth, "gpu-3", pool="node-b")["health"]
    assert (health["health"], health["reported_by"]) == ("Healthy", "node-b")
    # node-a's own devices are its to report, and node-b's agent cannot change them.
    mine = _report([_entry("gpu-0", "UNHEALTHY")])
    assert client.post(INGEST, json=mine, headers=agent_a).status_code == 200
    theirs = _report([_entry("gpu-0", "HEALTHY")], node_name="node-b")
    assert client.post(INGEST, json=theirs, headers=agent_b).status_code == 422
    assert _device(client, auth, "gpu-0")["health"]["health"] == "Unhealthy"


def test_a_report_older_than_the_stored_one_is_late_and_changes_nothing(
    client: TestClient, auth: dict[str, str], make_token: Callable[..., str]
) -> None:
    agent = _bearer(make_token("ingest", name="agent-a", node="node-a"))

    def post(observed_at: str, health: str, checked: str) -> Any:
        body = _report([_entry("gpu-0", health, lastUpdatedTime=checked)])
        body["observed_at"] = observed_at
        response = client.post(INGEST, json=body, headers=agent)
        assert response.status_code == 200, response.text
        return response.json()

    assert post("2026-12-03T12:00:00Z", "UNHEALTHY", "1764763200")["late"] == []
    events = client.get("/api/v1/events", headers=auth).json()["results"]
    # A retry of an earlier report, sent after the newer one.
    late = post("2026-12-03T11:59:00Z", "HEALTHY", "1764763100")
    assert (late["late"], late["changed"], late["health_changes"]) == (["node-a/gpu-0"], False, 0)
    # Observed later, but the driver's check of the device is older than the stored one's.
    late = post("2026-12-03T12:01:00Z", "HEALTHY", "1764763100")
    assert late["late"] == ["node-a/gpu-0"]
    device = _device(client, auth, "gpu-0")
    assert device["health"]["health"] == "Unhealthy"
    assert client.get("/api/v1/events", headers=auth).json()["results"] == events
    # A newer report is applied as ever.
    assert post("2026-12-03T12:02:00Z", "HEALTHY", "1764763300")["health_changes"] == 1
    assert _device(client, auth, "gpu-0")["health"]["health"] == "Healthy"


BAD_ENTRIES = [
    (_entry("GPU_0", "HEALTHY"), "devices[0].device.deviceName", "dns1123_label"),
    (_entry("gpu-0", "HEALTHY", pool="Pool A"), "devices[0].device.poolName", "pool_name"),
    (_entry("gpu-0", "BROKEN"), "devices[0].health", "literal_error"),
    (_entry("gpu-0", "HEALTHY", lastUpdatedTime="-1"), "devices[0].lastUpdatedTime", None),
    (_entry("gpu-0", "HEALTHY", message="x" * 1025), "devices[0].message", None),
]


@pytest.mark.parametrize(("entry", "field", "rule"), BAD_ENTRIES)
def test_bad_reports_are_refused_whole(
    fake_api: FakeApiServer,
    start_app: StartApp,
    auth: dict[str, str],
    make_token: Callable[..., str],
    entry: dict[str, Any],
    field: str,
    rule: str | None,
) -> None:
    client = _started(fake_api, start_app, auth)
    agent = _bearer(make_token("ingest", name="agent-a", node="node-a"))
    good = _entry("gpu-1", "UNHEALTHY")
    response = client.post(INGEST, json=_report([entry, good]), headers=agent)
    assert response.status_code == 422, response.text
    details = response.json()["error"]["details"]
    assert field in [d["field"] for d in details], details
    if rule is not None:
        assert rule in [d["rule"] for d in details], details
    # The good entry next to the bad one was not applied either.
    assert _device(client, auth, "gpu-1")["health"] is None


def test_repeated_devices_and_other_nodes_devices_are_refused(
    fake_api: FakeApiServer,
    start_app: StartApp,
    auth: dict[str, str],
    make_token: Callable[..., str],
) -> None:
    client = _started(fake_api, start_app, auth)
    agent = _bearer(make_token("ingest", name="agent-a", node="node-a"))
    twice = client.post(
        INGEST,
        json=_report([_entry("gpu-0", "HEALTHY"), _entry("gpu-0", "UNHEALTHY")]),
        headers=agent,
    )
    assert twice.status_code == 422
    assert "repeats the one at index 0" in twice.text

    # node-b's GPU, reported by node-a's agent: an agent speaks for its own node only.
    foreign = client.post(
        INGEST,
        json=_report([_entry("gpu-1", "HEALTHY"), _entry("gpu-0", "UNHEALTHY", pool="node-b")]),
        headers=agent,
    )
    assert foreign.status_code == 422, foreign.text
    (detail,) = foreign.json()["error"]["details"]
    assert (detail["field"], detail["rule"]) == ("devices[1].device", "other_node")
    assert "node-b" in detail["message"]
    assert _device(client, auth, "gpu-1")["health"] is None
    assert _device(client, auth, "gpu-0", pool="node-b")["health"] is None


def test_a_node_bound_token_reports_its_own_node_only(
    fake_api: FakeApiServer,
    start_app: StartApp,
    auth: dict[str, str],
    make_token: Callable[..., str],
) -> None:
    client = _started(fake_api, start_app, auth)
    other = _bearer(make_token("ingest", name="agent-b", node="node-b"))
    refused = client.post(INGEST, json=_report([_entry("gpu-0", "UNHEALTHY")]), headers=other)
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["code"] == "node_mismatch" and error["details"][0]["field"] == "node"
    reader = _bearer(make_token("read", name="reader"))
    assert client.post(INGEST, json=_report([]), headers=reader).status_code == 403
    assert _device(client, auth, "gpu-0")["health"] is None
    events = client.get("/api/v1/events", headers=auth).json()
    assert all(e["kind"] != "dra_health_changed" for e in events["results"])


def test_the_device_page_shows_the_stream_and_its_history(
    fake_api: FakeApiServer,
    start_app: StartApp,
    auth: dict[str, str],
    make_token: Callable[..., str],
) -> None:
    client = _started(fake_api, start_app, auth)
    agent = _bearer(make_token("ingest", name="agent-a", node="node-a"))
    entry = _entry(
        "gpu-1",
        "UNHEALTHY",
        lastUpdatedTime="1764763200",
        healthCheckTimeoutSeconds="60",
        message="Xid 79",
    )
    assert client.post(INGEST, json=_report([entry]), headers=agent).status_code == 200
    response = client.get(f"/dra/devices/{DRIVER}/node-a/gpu-1", headers=auth)
    assert response.status_code == 200, response.text[:2000]
    page = parse(response.text)
    assert "Unhealthy" in page.one("h1").clean_text
    text = page.clean_text
    assert "the driver\N{RIGHT SINGLE QUOTATION MARK}s health stream (DRAResourceHealth)" in text
    assert "Health stream" in text and "timeout 60 s" in text
    history = page.by_id("dra-health-title").parent
    assert history is not None and history.parent is not None
    (item,) = history.parent.find_all("li")
    assert "driver health stream of node-a" in item.clean_text
    assert "Xid 79" in item.clean_text
