"""Node-bound ingest tokens: a node's credential writes that node only, over real HTTP, and the
events it causes name the credential and the node."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from devicedeck.config import AuthMode, Settings
from devicedeck.main import create_app

from .conftest import dev, listandwatch, live_server, podresources
from .test_auth import devicedeck

LAW = "/api/v1/ingest/listandwatch"
POD_RESOURCES = "/api/v1/ingest/podresources"
TOKENS = "/api/v1/tokens"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def http(settings: Settings) -> Iterator[httpx.Client]:
    with live_server(create_app(settings)) as url, httpx.Client(base_url=url, timeout=60) as c:
        yield c


def pod(name: str, device: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "kube-system",
        "containers": [
            {
                "name": "main",
                "devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": [device]}],
            }
        ],
    }


def test_a_bound_token_writes_its_own_node_only(
    http: httpx.Client, make_token: Callable[..., str], auth: dict[str, str]
) -> None:
    victim = make_token("ingest", name="victim-agent", node="victim-node")
    attacker = make_token("ingest", name="attacker-agent", node="attacker-node")
    gpus = [dev(f"gpu-{i}") for i in range(4)]
    assert http.post(
        LAW, json=listandwatch("victim-node", gpus, 1), headers=bearer(victim)
    ).is_success
    before = http.get("/api/v1/devices", params={"node": "victim-node"}, headers=auth).json()
    events_before = http.get("/api/v1/events", headers=auth).json()["count"]

    forged = [
        (LAW, listandwatch("victim-node", [], 1, boot="another-boot")),
        (POD_RESOURCES, podresources("victim-node", [pod("fake-pod", "gpu-0")], 2)),
    ]
    for path, body in forged:
        refused = http.post(path, json=body, headers=bearer(attacker))
        assert refused.status_code == 403, refused.text
        error = refused.json()["error"]
        assert error["code"] == "node_mismatch"
        assert "attacker-node" in error["message"] and "victim-node" in error["message"]
        assert error["details"][0]["field"] == "node"

    after = http.get("/api/v1/devices", params={"node": "victim-node"}, headers=auth).json()
    assert after == before
    assert http.get("/api/v1/events", headers=auth).json()["count"] == events_before
    nodes = [n["name"] for n in http.get("/api/v1/nodes", headers=auth).json()["results"]]
    assert "attacker-node" not in nodes
    # A token bound to a node that has not reported yet is fine: the first snapshot makes it.
    own = http.post(
        LAW, json=listandwatch("attacker-node", [dev("gpu-0")], 1), headers=bearer(attacker)
    )
    assert own.status_code == 200, own.text


def test_an_all_nodes_token_writes_any_node(
    http: httpx.Client, make_token: Callable[..., str]
) -> None:
    fleet = make_token("ingest", name="fleet")
    for node in ("node-a", "node-b"):
        answer = http.post(LAW, json=listandwatch(node, [dev("gpu-0")], 1), headers=bearer(fleet))
        assert answer.status_code == 200, answer.text


def test_events_name_the_token_and_the_node(
    http: httpx.Client, make_token: Callable[..., str], auth: dict[str, str]
) -> None:
    token = make_token("ingest", name="agent-gpu-a", node="gpu-a")
    http.post(LAW, json=listandwatch("gpu-a", [dev("gpu-0")], 1), headers=bearer(token))
    http.post(
        LAW, json=listandwatch("gpu-a", [dev("gpu-0", "Unhealthy")], 2), headers=bearer(token)
    )
    events = http.get("/api/v1/events", params={"node": "gpu-a"}, headers=auth).json()["results"]
    assert {e["kind"] for e in events} >= {"device_added", "health_changed"}
    assert {e["actor"] for e in events} == {"agent-gpu-a@gpu-a"}
    # The dashboard's event table says the same.
    page = http.get("/events", headers=auth)
    assert page.status_code == 200, page.text
    assert "agent-gpu-a@gpu-a" in page.text


def test_with_auth_off_ingest_still_needs_a_token_and_events_name_it(
    settings: Settings, make_token: Callable[..., str]
) -> None:
    # Auth off opens reading only: an anonymous snapshot is refused, so every ingested change
    # is credited to a real credential and its node, never to "anonymous".
    token = make_token("ingest", name="agent-gpu-b", node="gpu-b")
    app = create_app(settings.model_copy(update={"auth": AuthMode.OFF}))
    with live_server(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        body = listandwatch("gpu-b", [dev("gpu-0")], 1)
        assert http.post(LAW, json=body).status_code == 401
        assert http.post(LAW, json=body, headers=bearer(token)).status_code == 200
        events = http.get("/api/v1/events").json()["results"]
    assert events and {e["actor"] for e in events} == {"agent-gpu-b@gpu-b"}


def test_token_api_binds_ingest_tokens(http: httpx.Client, auth: dict[str, str]) -> None:
    def create(body: dict[str, Any]) -> httpx.Response:
        return http.post(TOKENS, json=body, headers=auth)

    unbound = create({"name": "a", "scopes": ["ingest"]})
    assert unbound.status_code == 422, unbound.text
    [problem] = unbound.json()["error"]["details"]
    assert (problem["field"], problem["rule"]) == ("node", "required")
    assert "--node" in problem["message"] and "--all-nodes" in problem["message"]
    both = create({"name": "a", "scopes": ["ingest"], "node": "n", "all_nodes": True})
    assert both.status_code == 422
    reader = create({"name": "a", "scopes": ["read"], "node": "n"})
    assert reader.status_code == 422
    names = [t["name"] for t in http.get(TOKENS, headers=auth).json()["results"]]
    assert "a" not in names

    bound = create({"name": "agent-a", "scopes": ["ingest"], "node": "node-a"})
    assert bound.status_code == 201, bound.text
    assert (bound.json()["node"], bound.json()["all_nodes"]) == ("node-a", False)
    fleet = create({"name": "fleet", "scopes": ["ingest"], "all_nodes": True})
    assert fleet.status_code == 201, fleet.text
    listing = {t["name"]: t for t in http.get(TOKENS, headers=auth).json()["results"]}
    assert (listing["agent-a"]["node"], listing["agent-a"]["all_nodes"]) == ("node-a", False)
    assert (listing["fleet"]["node"], listing["fleet"]["all_nodes"]) == (None, True)
    token = bound.json()["token"]
    refused = http.post(LAW, json=listandwatch("node-b", [dev("gpu-0")], 1), headers=bearer(token))
    assert refused.status_code == 403


def test_token_cli_refuses_an_unbound_ingest_token_and_lists_bindings(
    database_url: str, settings: Settings
) -> None:
    refused = devicedeck(database_url, "token", "create", "--name", "x", "--scope", "ingest")
    assert refused.returncode == 2
    assert "--node" in refused.stderr and "--all-nodes" in refused.stderr

    made = devicedeck(
        database_url, "token", "create", "--name", "agent-a", "--scope", "ingest", "--node", "a"
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    fleet = devicedeck(
        database_url, "token", "create", "--name", "fleet", "--scope", "ingest", "--all-nodes"
    )
    assert fleet.returncode == 0, fleet.stderr
    listing = devicedeck(database_url, "token", "list").stdout.splitlines()
    assert "WRITES" in listing[0]
    assert not any(line.startswith("x ") for line in listing)
    [agent_row] = [line for line in listing if line.startswith("agent-a")]
    [fleet_row] = [line for line in listing if line.startswith("fleet")]
    assert "node a" in agent_row and "all nodes" in fleet_row

    with live_server(create_app(settings)) as url, httpx.Client(base_url=url, timeout=60) as http:
        own = http.post(LAW, json=listandwatch("a", [dev("gpu-0")], 1), headers=bearer(token))
        assert own.status_code == 200, own.text
        other = http.post(LAW, json=listandwatch("b", [dev("gpu-0")], 1), headers=bearer(token))
        assert other.status_code == 403
        assert other.json()["error"]["code"] == "node_mismatch"
