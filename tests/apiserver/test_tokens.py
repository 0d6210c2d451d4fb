"""TokenRequest and TokenReview: a pod-bound ServiceAccount token names its pod and node."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from devicedeck.sim.apiserver import SimApiServer

from .conftest import http, node_object, pod_object

EXTRA = "authentication.kubernetes.io/"


def token_request(core: k8s.CoreV1Api, spec: dict[str, Any], account: str = "agent") -> Any:
    return core.create_namespaced_service_account_token(
        account,
        "devicedeck",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )


def review(api_client: k8s.ApiClient, token: str, audiences: list[str] | None = None) -> Any:
    spec: dict[str, Any] = {"token": token}
    if audiences:
        spec["audiences"] = audiences
    return k8s.AuthenticationV1Api(api_client).create_token_review({"spec": spec}).status


def test_a_pod_bound_token_reviews_with_its_pod_and_node(
    api: SimApiServer, core: k8s.CoreV1Api, api_client: k8s.ApiClient
) -> None:
    node = core.create_node(node_object("node-a"))
    pod = core.create_namespaced_pod("devicedeck", pod_object("devicedeck", "agent-x", "node-a"))
    issued = token_request(
        core,
        {
            "audiences": ["devicedeck"],
            "expirationSeconds": 600,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": "agent-x",
                "uid": pod.metadata.uid,
            },
        },
    )
    assert issued.status.token and issued.status.expiration_timestamp
    status = review(api_client, issued.status.token, ["devicedeck"])
    assert status.authenticated is True
    assert status.user.username == "system:serviceaccount:devicedeck:agent"
    assert "system:serviceaccounts:devicedeck" in status.user.groups
    assert status.user.extra[f"{EXTRA}pod-name"] == ["agent-x"]
    assert status.user.extra[f"{EXTRA}pod-uid"] == [pod.metadata.uid]
    assert status.user.extra[f"{EXTRA}node-name"] == ["node-a"]
    assert status.user.extra[f"{EXTRA}node-uid"] == [node.metadata.uid]
    assert status.audiences == ["devicedeck"]

    # Other audiences: not for them.
    assert review(api_client, issued.status.token, ["someone-else"]).authenticated is False
    # The pod goes: its token is no longer good.
    core.delete_namespaced_pod("agent-x", "devicedeck")
    gone = review(api_client, issued.status.token, ["devicedeck"])
    assert gone.authenticated is False
    assert "agent-x" in gone.error


def test_tokens_it_did_not_issue_are_not_authenticated(
    api: SimApiServer, core: k8s.CoreV1Api, api_client: k8s.ApiClient
) -> None:
    issued = token_request(core, {})
    header, payload, signature = issued.status.token.split(".")
    for token in ("not-a-jwt", f"{header}.{payload}.{signature[::-1]}", api.store.admin_token):
        status = review(api_client, token)
        assert status.authenticated is False
        assert status.error
    # Unbound, default audience: good for the API server itself.
    assert review(api_client, issued.status.token).authenticated is True
    assert http(api, "GET", "/api/v1/nodes", token=issued.status.token)[0] == 200


@pytest.mark.parametrize(
    ("spec", "code", "reason"),
    [
        ({"expirationSeconds": 60}, 422, "Invalid"),
        (
            {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "nobody"}},
            404,
            "NotFound",
        ),
        (
            {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "old"}},
            409,
            "Conflict",
        ),
        (
            {"boundObjectRef": {"apiVersion": "v1", "kind": "ConfigMap", "name": "p"}},
            400,
            "BadRequest",
        ),
    ],
)
def test_token_requests_refused(
    api: SimApiServer, core: k8s.CoreV1Api, spec: dict[str, Any], code: int, reason: str
) -> None:
    core.create_namespaced_pod("devicedeck", pod_object("devicedeck", "p", "node-a"))
    status, body = http(
        api, "POST", "/api/v1/namespaces/devicedeck/serviceaccounts/agent/token", {"spec": spec}
    )
    assert (status, body["kind"], body["reason"]) == (code, "Status", reason)
