"""The node page's forms for hand-advertised extended resources send the documented patch."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from .conftest import StartApp, wait_for
from .fake_apiserver import FakeApiServer
from .objects import node

ORIGIN = {"Origin": "http://testserver"}
FORM_URL = "/nodes/node-a/extended-resources"
MakeToken = Any


def _signed_in(
    fake_api: FakeApiServer, start_app: StartApp, token: str, auth: dict[str, str]
) -> TestClient:
    fake_api.put("nodes", node("node-a", capacity={}))
    client = start_app()
    wait_for(
        lambda: client.get("/api/v1/nodes/node-a", headers=auth).status_code == 200,
        what="node-a from the API server",
    )
    sign_in(client, token)
    return client


def sign_in(client: TestClient, token: str) -> None:
    """Through the login form, as a browser does: the client keeps the session cookie."""
    found = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").text)
    assert found is not None
    response = client.post(
        "/login",
        data={"token": token, "csrf_token": found.group(1)},
        headers=ORIGIN,
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text


def _csrf(client: TestClient) -> str:
    page = client.get("/nodes/node-a")
    assert page.status_code == 200, page.text
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


def test_admin_sets_and_removes_a_resource_from_the_node_page(
    fake_api: FakeApiServer, start_app: StartApp, make_token: MakeToken, auth: dict[str, str]
) -> None:
    client = _signed_in(fake_api, start_app, make_token("admin", name="alice"), auth)
    page = client.get("/nodes/node-a").text
    assert f'action="{FORM_URL}"' in page

    form = {"csrf_token": _csrf(client), "action": "set", "resource": "example.com/dongle"}
    sent = client.post(
        FORM_URL, data={**form, "quantity": "4"}, headers=ORIGIN, follow_redirects=False
    )
    assert sent.status_code == 303, sent.text
    assert sent.headers["location"] == "/nodes/node-a"
    (patch,) = fake_api.recorded("PATCH")
    assert patch.path == "/api/v1/nodes/node-a/status"
    assert patch.headers["content-type"] == "application/json-patch+json"
    assert patch.json() == [
        {"op": "add", "path": "/status/capacity/example.com~1dongle", "value": "4"}
    ]
    shown = client.get("/nodes/node-a").text
    assert re.search(
        r'<th scope="row" class="mono">example.com/dongle</th><td class="num">4', shown
    )

    removed = client.post(
        FORM_URL, data={**form, "action": "remove"}, headers=ORIGIN, follow_redirects=False
    )
    assert removed.status_code == 303, removed.text
    assert fake_api.recorded("PATCH")[-1].json() == [
        {"op": "remove", "path": "/status/capacity/example.com~1dongle"}
    ]
    events = client.get("/api/v1/events", params={"kind": "admin_action"}, headers=auth).json()
    assert {e["actor"] for e in events["results"]} == {"alice"}


def test_bad_input_and_missing_scope_change_nothing(
    fake_api: FakeApiServer, start_app: StartApp, make_token: MakeToken, auth: dict[str, str]
) -> None:
    client = _signed_in(fake_api, start_app, make_token("admin", name="alice"), auth)
    form = {"csrf_token": _csrf(client), "action": "set", "resource": "example.com/dongle"}

    bad = client.post(FORM_URL, data={**form, "quantity": "-3"}, headers=ORIGIN)
    assert bad.status_code == 422
    assert "whole number" in bad.text
    bad_name = client.post(
        FORM_URL, data={**form, "resource": "dongle", "quantity": "1"}, headers=ORIGIN
    )
    assert bad_name.status_code == 422
    cross_site = client.post(
        FORM_URL, data={**form, "quantity": "1"}, headers={"Origin": "http://evil.example"}
    )
    assert cross_site.status_code == 403

    sign_in(client, make_token("read", name="bob"))
    assert f'action="{FORM_URL}"' not in client.get("/nodes/node-a").text
    reader = client.post(FORM_URL, data={**form, "quantity": "1"}, headers=ORIGIN)
    assert reader.status_code == 403
    assert fake_api.recorded("PATCH") == []
