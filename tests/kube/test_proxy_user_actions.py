"""An admin signed in through the single sign-on proxy changes a node's extended resource: the
event names the user, as it names a token's holder."""

from __future__ import annotations

from fastapi.testclient import TestClient

from devicedeck.config import Settings
from devicedeck.main import create_app

from .conftest import wait_for
from .fake_apiserver import FakeApiServer
from .objects import node

URL = "/api/v1/nodes/node-a/extended-resources/example.com/dongle"
HEADER = "X-Auth-Request-Email"


def test_an_admin_action_through_the_proxy_is_credited_to_the_user(
    fake_api: FakeApiServer, kube_settings: Settings, auth: dict[str, str]
) -> None:
    fake_api.put("nodes", node("node-a", capacity={}))
    settings = kube_settings.model_copy(
        update={
            "proxy_user_header": HEADER,
            "proxy_trusted_cidrs": "10.20.0.0/16",
            "proxy_admins": "alice@example.com",
        }
    )
    with TestClient(create_app(settings), client=("10.20.3.4", 41000)) as client:
        wait_for(
            lambda: client.get("/api/v1/nodes/node-a", headers=auth).status_code == 200,
            what="node-a from the API server",
        )
        reader = client.put(URL, json={"quantity": 4}, headers={HEADER: "bob@example.com"})
        assert reader.status_code == 403
        assert fake_api.recorded("PATCH") == []
        done = client.put(URL, json={"quantity": 4}, headers={HEADER: "alice@example.com"})
        assert done.status_code == 200, done.text
        (event,) = client.get("/api/v1/events?kind=admin_action", headers=auth).json()["results"]
    assert (event["actor"], event["node"]) == ("alice@example.com", "node-a")
