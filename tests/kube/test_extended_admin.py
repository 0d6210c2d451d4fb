"""Hand-advertised extended resources: the documented JSON Patch on node status, and refusals."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from devicedeck.kube.extended_admin import capacity_patch, json_pointer_token

from .conftest import Factory, StartApp, ingest_devices, wait_for, write_kubeconfig
from .fake_apiserver import FakeApiServer
from .objects import node

DONGLE = "example.com/dongle"
URL = "/api/v1/nodes/node-a/extended-resources/example.com/dongle"
MakeToken = Any


@pytest.fixture
def admin(make_token: MakeToken) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_token('admin', name='alice')}"}


@pytest.fixture
def synced(fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str]) -> TestClient:
    fake_api.put("nodes", node("node-a", capacity={}))
    client = start_app()
    wait_for(
        lambda: client.get("/api/v1/nodes/node-a", headers=auth).status_code == 200,
        what="node-a from the API server",
    )
    return client


def _patches(fake_api: FakeApiServer) -> list[Any]:
    return fake_api.recorded("PATCH")


def test_put_sends_the_documented_patch_and_records_who(
    fake_api: FakeApiServer, synced: TestClient, admin: dict[str, str], auth: dict[str, str]
) -> None:
    response = synced.put(URL, json={"quantity": 4}, headers=admin)
    assert response.status_code == 200, response.text
    assert response.json()["capacity"] == "4"

    (sent,) = _patches(fake_api)
    assert sent.method == "PATCH"
    assert sent.path == "/api/v1/nodes/node-a/status"
    assert sent.headers["content-type"] == "application/json-patch+json"
    assert b"/status/capacity/example.com~1dongle" in sent.body
    assert sent.json() == [
        {"op": "add", "path": "/status/capacity/example.com~1dongle", "value": "4"}
    ]
    assert fake_api.get("nodes", "node-a")["status"]["capacity"][DONGLE] == "4"

    detail = synced.get("/api/v1/nodes/node-a", headers=auth).json()
    assert detail["capacity"][DONGLE] == "4"
    (manual,) = detail["manual_extended_resources"]
    assert (manual["resource"], manual["capacity"], manual["allocatable"]) == (DONGLE, 4, None)
    (event,) = synced.get("/api/v1/events?kind=admin_action", headers=auth).json()["results"]
    assert (event["actor"], event["node"], event["resource"]) == ("alice", "node-a", DONGLE)
    assert event["before"] == {"capacity": None}
    assert event["after"]["capacity"] == "4"

    # Changing it is the same "add"; removing it is "remove" on the same escaped path.
    assert synced.put(URL, json={"quantity": 2}, headers=admin).status_code == 200
    assert _patches(fake_api)[-1].json()[0] == {
        "op": "add",
        "path": "/status/capacity/example.com~1dongle",
        "value": "2",
    }
    response = synced.delete(URL, headers=admin)
    assert response.status_code == 200, response.text
    assert response.json()["capacity"] is None
    assert _patches(fake_api)[-1].json() == [
        {"op": "remove", "path": "/status/capacity/example.com~1dongle"}
    ]
    assert DONGLE not in fake_api.get("nodes", "node-a")["status"]["capacity"]
    actions = synced.get("/api/v1/events?kind=admin_action", headers=auth).json()["results"]
    assert [e["after"]["action"] for e in actions] == [
        "remove_extended_resource",
        "set_extended_resource",
        "set_extended_resource",
    ]


def test_refusals_by_the_api_server_are_clear_errors(
    fake_api: FakeApiServer, synced: TestClient, admin: dict[str, str]
) -> None:
    # Removing what is not there: the API server's JSON Patch fails; we say what is missing.
    response = synced.delete(URL, headers=admin)
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["details"][0]["field"] == "resource"
    # The API server's own message for a failed JSON Patch is generic (422 Invalid).
    assert "node node-a has no example.com/dongle in status.capacity" in error["message"]

    fake_api.refuse_next_patch(
        403,
        "Forbidden",
        'nodes "node-a" is forbidden: User "system:serviceaccount:devicedeck:devicedeck" '
        'cannot patch resource "nodes/status"',
    )
    response = synced.put(URL, json={"quantity": 1}, headers=admin)
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "api_server_refused"
    assert 'cannot patch resource "nodes/status"' in error["message"]
    # The operator learns how to grant it.
    assert "deploy/kubernetes/components/node-status-patch" in error["message"]
    assert error["details"][0]["rule"] == "api_server:Forbidden"

    fake_api.refuse_next_patch(409, "Conflict", "the object has been modified")
    assert synced.put(URL, json={"quantity": 1}, headers=admin).status_code == 409

    fake_api.refuse_next_patch(500, "InternalError", "etcdserver: request timed out")
    response = synced.put(URL, json={"quantity": 1}, headers=admin)
    assert response.status_code == 503
    assert "etcdserver: request timed out" in response.json()["error"]["message"]

    response = synced.put(
        "/api/v1/nodes/node-z/extended-resources/example.com/dongle",
        json={"quantity": 1},
        headers=admin,
    )
    assert response.status_code == 404
    assert 'nodes "node-z" not found' in response.json()["error"]["message"]


BAD_INPUT = [
    ("/api/v1/nodes/node-a/extended-resources/dongle", {"quantity": 1}, "resource", None),
    (
        "/api/v1/nodes/node-a/extended-resources/kubernetes.io/dongle",
        {"quantity": 1},
        "resource",
        "extended_resource_name",
    ),
    ("/api/v1/nodes/Node_A/extended-resources/example.com/d", {"quantity": 1}, "node", None),
    (URL, {"quantity": -1}, "quantity", "greater_than_equal"),
    (URL, {"quantity": "4"}, "quantity", "int_type"),
    (URL, {"quantity": 1.5}, "quantity", "int_type"),
    (URL, {"quantity": True}, "quantity", "int_type"),
    (URL, {}, "quantity", "missing"),
]


def test_bad_input_is_rejected_before_the_api_server_sees_it(
    fake_api: FakeApiServer, synced: TestClient, admin: dict[str, str]
) -> None:
    for url, body, field, rule in BAD_INPUT:
        response = synced.put(url, json=body, headers=admin)
        assert response.status_code == 422, (url, body, response.text)
        detail = response.json()["error"]["details"][0]
        assert detail["field"] == field, (url, body, detail)
        if rule:
            assert detail["rule"] == rule, (url, body, detail)
    response = synced.delete("/api/v1/nodes/node-a/extended-resources/dongle", headers=admin)
    assert response.status_code == 422
    assert _patches(fake_api) == []


def test_admin_scope_and_plugin_resources_are_guarded(
    fake_api: FakeApiServer,
    synced: TestClient,
    admin: dict[str, str],
    make_token: MakeToken,
    session_factory: Factory,
) -> None:
    reader = {"Authorization": f"Bearer {make_token('read', 'ingest')}"}
    assert synced.put(URL, json={"quantity": 1}, headers=reader).status_code == 403
    assert synced.delete(URL, headers=reader).status_code == 403

    ingest_devices(session_factory, "node-a", "example.com/gpu", {"gpu-0": "Healthy"})
    response = synced.put(
        "/api/v1/nodes/node-a/extended-resources/example.com/gpu",
        json={"quantity": 3},
        headers=admin,
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "managed_by_device_plugin"
    assert _patches(fake_api) == []


def test_without_the_integration_the_answer_is_503_naming_the_setting(
    client: TestClient, admin: dict[str, str]
) -> None:
    response = client.put(URL, json={"quantity": 4}, headers=admin)
    assert response.status_code == 503
    assert "DEVICEDECK_KUBE is off" in response.json()["error"]["message"]


def test_an_unreachable_api_server_is_503(
    start_app: StartApp, tmp_path: Path, admin: dict[str, str]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    config = write_kubeconfig(tmp_path / "unreachable", f"http://127.0.0.1:{closed_port}")
    client = start_app(kubeconfig=str(config))
    response = client.put(URL, json={"quantity": 4}, headers=admin)
    assert response.status_code == 503
    assert "cannot be reached" in response.json()["error"]["message"]


def test_json_pointer_escaping() -> None:
    assert json_pointer_token("example.com/dongle") == "example.com~1dongle"
    # "~" is escaped first, so a literal "~1" in a name cannot turn into "/".
    assert json_pointer_token("a~1/b") == "a~01~1b"
    assert capacity_patch("example.com/dongle", 0) == [
        {"op": "add", "path": "/status/capacity/example.com~1dongle", "value": "0"}
    ]
