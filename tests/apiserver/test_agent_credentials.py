"""The demo's agent credentials: Pod-bound ServiceAccount tokens from the simulated API server,
renewed the way the kubelet renews projected tokens."""

from __future__ import annotations

import threading
from pathlib import Path

from devicedeck.demo.agent_credentials import (
    AGENT_NAMESPACE,
    RENEW_AT,
    TOKEN_SECONDS,
    AgentCredentials,
    agent_pod_name,
)
from devicedeck.sim.apiserver import SimApiServer
from devicedeck.sim.kubeclient import KubeClient

from .conftest import http, node_object


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def review(api: SimApiServer, token: str) -> dict[str, object]:
    status, answer = http(
        api,
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": ["devicedeck"]},
        },
    )
    assert status == 201, answer
    result: dict[str, object] = answer["status"]
    return result


def test_each_agent_gets_a_token_bound_to_its_pod_and_node_then_a_new_one_before_expiry(
    api: SimApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    for node in ("gpu-a", "gpu-b"):
        assert http(api, "POST", "/api/v1/nodes", node_object(node))[0] == 201
    files = {node: tmp_path / "tokens" / f"{node}.token" for node in ("gpu-a", "gpu-b")}
    clock = Clock()
    keeper = AgentCredentials(kubeconfig, files.items(), threading.Event(), clock=clock)
    client = KubeClient.from_kubeconfig(kubeconfig)

    keeper.renew_due(client)

    assert keeper.all_issued()
    first = {node: path.read_text().strip() for node, path in files.items()}
    for node, token in first.items():
        assert files[node].stat().st_mode & 0o777 == 0o600
        answer = review(api, token)
        assert answer["authenticated"] is True, answer
        user = answer["user"]
        assert isinstance(user, dict)
        assert user["username"] == "system:serviceaccount:devicedeck-agent:devicedeck-agent"
        extra = user["extra"]
        assert extra["authentication.kubernetes.io/node-name"] == [node]
        assert extra["authentication.kubernetes.io/pod-name"] == [agent_pod_name(node)]
    pod = http(api, "GET", f"/api/v1/namespaces/{AGENT_NAMESPACE}/pods/{agent_pod_name('gpu-a')}")
    assert pod[1]["spec"]["nodeName"] == "gpu-a"

    # Not yet due: the files keep their tokens.
    clock.now += TOKEN_SECONDS * RENEW_AT - 1
    keeper.renew_due(client)
    assert {node: path.read_text().strip() for node, path in files.items()} == first

    # 80 % of the token's life gone: fresh tokens, still for the same Pods.
    clock.now += 2
    keeper.renew_due(client)
    for node, path in files.items():
        renewed = path.read_text().strip()
        assert renewed != first[node]
        assert review(api, renewed)["authenticated"] is True


def test_an_unreachable_api_server_is_retried_without_losing_the_old_token(
    api: SimApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    assert http(api, "POST", "/api/v1/nodes", node_object("gpu-a"))[0] == 201
    path = tmp_path / "gpu-a.token"
    path.write_text("earlier-token\n")
    clock = Clock()
    keeper = AgentCredentials(kubeconfig, [("gpu-a", path)], threading.Event(), clock=clock)
    gone = KubeClient("http://127.0.0.1:9")  # nothing listens on the discard port

    keeper.renew_due(gone)

    assert not keeper.all_issued()
    assert path.read_text() == "earlier-token\n"
    clock.now += 5  # past the retry delay
    keeper.renew_due(KubeClient.from_kubeconfig(kubeconfig))
    assert keeper.all_issued()
    assert review(api, path.read_text().strip())["authenticated"] is True
