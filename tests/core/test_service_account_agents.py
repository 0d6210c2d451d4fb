"""Node agents authenticating as a ServiceAccount: the service checks their projected tokens
with the simulated API server's TokenReview and lets each write its own node only."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from devicedeck.config import KubeMode, Settings
from devicedeck.main import create_app
from devicedeck.sim.apiserver import SimApiServer

from .conftest import dev, listandwatch, live_server

LAW = "/api/v1/ingest/listandwatch"
AGENTS = "devicedeck-agent"
AGENT_ACCOUNT = f"system:serviceaccount:{AGENTS}:devicedeck-agent"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SimApiServer]:
    """The simulated API server; a test may name another kind with `indirect` parameters."""
    data_dir = tmp_path / "cluster"
    data_dir.mkdir()
    kind = getattr(request, "param", SimApiServer)
    server = kind(data_dir).start()
    try:
        yield server
    finally:
        if server.thread.is_alive():  # a test may have stopped it already
            server.stop()


class AudienceAgnosticApiServer(SimApiServer):
    """An API server whose token authenticator names no audiences in its reviews, as an
    audience-agnostic one does: Kubernetes then means its own audiences."""

    def start(self) -> AudienceAgnosticApiServer:
        super().start()
        review = self.tokens.review

        def without_audiences(body: Any) -> dict[str, Any]:
            answer = review(body)
            answer["status"].pop("audiences", None)
            return answer

        self.tokens.review = without_audiences  # type: ignore[method-assign]
        return self


@pytest.fixture
def core(cluster: SimApiServer, tmp_path: Path) -> Iterator[k8s.CoreV1Api]:
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(
        config_file=str(cluster.write_kubeconfig(tmp_path / "admin-kubeconfig")),
        client_configuration=configuration,
        persist_config=False,
    )
    with k8s.ApiClient(configuration) as client:
        yield k8s.CoreV1Api(client)


IssueToken = Callable[..., str]


@pytest.fixture
def issue_token(core: k8s.CoreV1Api) -> IssueToken:
    """A TokenRequest's token, as the kubelet projects it into an agent pod on `node`."""

    def issue(
        node: str | None,
        *,
        account: str = "devicedeck-agent",
        namespace: str = AGENTS,
        audience: str = "devicedeck",
    ) -> str:
        spec: dict[str, Any] = {"audiences": [audience], "expirationSeconds": 3600}
        if node is not None:
            pod_name = f"agent-{node}-{account}"
            pod = core.create_namespaced_pod(
                namespace,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": pod_name, "namespace": namespace},
                    "spec": {
                        "nodeName": node,
                        "containers": [{"name": "agent", "image": "devicedeck:0.1.0"}],
                    },
                },
            )
            spec["boundObjectRef"] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod_name,
                "uid": pod.metadata.uid,
            }
        issued = core.create_namespaced_service_account_token(
            account,
            namespace,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        return str(issued.status.token)

    return issue


@pytest.fixture
def service(settings: Settings, cluster: SimApiServer, tmp_path: Path) -> Iterator[httpx.Client]:
    kubeconfig = cluster.write_kubeconfig(tmp_path / "service-kubeconfig")
    app = create_app(
        settings.model_copy(update={"kube": KubeMode.KUBECONFIG, "kubeconfig": str(kubeconfig)})
    )
    with live_server(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        yield http


def test_an_agents_service_account_token_writes_its_own_node_only(
    service: httpx.Client, issue_token: IssueToken, auth: dict[str, str]
) -> None:
    token = issue_token("gpu-a")
    own = service.post(LAW, json=listandwatch("gpu-a", [dev("gpu-0")], 1), headers=bearer(token))
    assert own.status_code == 200, own.text
    events = service.get("/api/v1/events", params={"node": "gpu-a"}, headers=auth).json()
    assert {e["actor"] for e in events["results"]} == {f"{AGENT_ACCOUNT}@gpu-a"}

    other = service.post(LAW, json=listandwatch("gpu-b", [], 1), headers=bearer(token))
    assert other.status_code == 403, other.text
    error = other.json()["error"]
    assert error["code"] == "node_mismatch"
    assert "gpu-a" in error["message"] and "gpu-b" in error["message"]
    # Ingest only: never read or admin.
    assert service.get("/api/v1/devices", headers=bearer(token)).status_code == 403
    assert service.get("/api/v1/tokens", headers=bearer(token)).status_code == 403
    nodes = [n["name"] for n in service.get("/api/v1/nodes", headers=auth).json()["results"]]
    assert nodes == ["gpu-a"]


def test_tokens_that_are_not_an_agents_are_refused_and_change_nothing(
    service: httpx.Client, issue_token: IssueToken, auth: dict[str, str]
) -> None:
    refused = {
        "another audience": (issue_token("gpu-a", audience="https://kubernetes.default.svc"), 401),
        "unknown": ("eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjF9.bm90LXNpZ25lZA", 401),
        "not an agent account": (issue_token("gpu-a", account="intruder"), 403),
        "names no node": (issue_token(None), 403),
    }
    for case, (token, status) in refused.items():
        answer = service.post(LAW, json=listandwatch("gpu-a", [], 1), headers=bearer(token))
        assert answer.status_code == status, (case, answer.text)
        assert answer.json()["error"]["message"], case
    assert service.get("/api/v1/nodes", headers=auth).json()["count"] == 0


@pytest.mark.parametrize("cluster", [AudienceAgnosticApiServer], indirect=True)
def test_a_review_that_names_no_audience_is_refused(
    service: httpx.Client, issue_token: IssueToken, auth: dict[str, str]
) -> None:
    token = issue_token("gpu-a")
    answer = service.post(LAW, json=listandwatch("gpu-a", [], 1), headers=bearer(token))
    assert answer.status_code == 401, answer.text
    assert "audience 'devicedeck'" in answer.json()["error"]["message"]
    assert service.get("/api/v1/nodes", headers=auth).json()["results"] == []


def test_tokenreview_unreachable_answers_503_and_applies_nothing(
    service: httpx.Client,
    issue_token: IssueToken,
    cluster: SimApiServer,
    auth: dict[str, str],
) -> None:
    token = issue_token("gpu-c")
    cluster.stop()
    answer = service.post(LAW, json=listandwatch("gpu-c", [dev("gpu-0")], 1), headers=bearer(token))
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "unavailable"
    assert answer.headers["retry-after"]
    assert service.get("/api/v1/nodes", headers=auth).json()["count"] == 0
