"""/livez, /readyz, /metrics and the OpenAPI documentation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import make_url

from devicedeck.config import Settings
from devicedeck.main import create_app

from .conftest import GPU, Api, dev, held, listandwatch, pod, podresources


def test_livez_and_readyz_need_no_token(client: TestClient) -> None:
    assert client.get("/livez").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ok"}


def unreachable(database_url: str, tmp_path: Any) -> str:
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        return f"sqlite:///{tmp_path}/no/such/dir/devicedeck.db"
    # Port 9 (discard) has no PostgreSQL behind it: the connection is refused at once.
    return url.set(port=9).render_as_string(hide_password=False)


@pytest.fixture
def unreachable_client(
    settings: Settings, database_url: str, tmp_path: Any
) -> Iterator[TestClient]:
    """The app, started with a database it cannot reach."""
    broken = settings.model_copy(update={"database_url": unreachable(database_url, tmp_path)})
    app = create_app(broken)
    app.state.background_starters.clear()
    with TestClient(app) as client:
        yield client


def test_readyz_is_503_when_the_database_is_unreachable(unreachable_client: TestClient) -> None:
    client = unreachable_client
    response = client.get("/readyz")
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "unavailable" and "database" in error["message"]
    # The process itself is alive.
    assert client.get("/livez").status_code == 200


def test_api_is_503_not_500_when_the_database_is_unreachable(
    unreachable_client: TestClient,
) -> None:
    client = unreachable_client
    answers = [
        # The token check itself needs the database.
        client.get("/api/v1/nodes", headers={"Authorization": "Bearer ddk_whatever"}),
        client.post(
            "/api/v1/ingest/listandwatch",
            json=listandwatch("node-a", [dev("gpu-0")], 1),
            headers={"Authorization": "Bearer ddk_whatever"},
        ),
    ]
    for response in answers:
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] == "1"
        error = response.json()["error"]
        assert error["code"] == "unavailable" and "database" in error["message"]


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_metrics_count_devices_and_ingests(api: Api) -> None:
    body = listandwatch("node-a", [dev("gpu-0"), dev("gpu-1"), dev("gpu-2", "Unhealthy")], 1)
    api.ingest_listandwatch(body)
    api.ingest_listandwatch(body | {"source": {"boot_id": "b", "seq": 2}})  # unchanged
    api.ingest_listandwatch(body | {"source": {"boot_id": "b", "seq": 2}})  # duplicate
    api.ingest_listandwatch(
        body | {"source": {"boot_id": "b", "seq": 1}}, expect=409
    )  # refused: older seq
    api.ingest_listandwatch(listandwatch("node-b", [dev("nic-0")], 1, resource="example.com/nic"))
    api.ingest_podresources(
        podresources("node-a", [pod("p", containers={"c": [held(GPU, "gpu-0")]})], 1)
    )

    response = api.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = metric_samples(response.text)

    def devices(resource: str, health: str) -> float:
        return samples[("devicedeck_devices", (("health", health), ("resource", resource)))]

    assert devices(GPU, "Healthy") == 2
    assert devices(GPU, "Unhealthy") == 1
    assert devices("example.com/nic", "Healthy") == 1

    def ingests(kind: str, outcome: str) -> float:
        key = (("kind", kind), ("outcome", outcome))
        return samples.get(("devicedeck_ingest_snapshots_total", key), 0.0)

    assert ingests("listandwatch", "changed") == 2
    assert ingests("listandwatch", "unchanged") == 1
    assert ingests("listandwatch", "duplicate") == 1
    assert ingests("listandwatch", "refused") == 1
    assert ingests("podresources", "changed") == 1
    latency = ("devicedeck_ingest_duration_seconds_count", (("kind", "listandwatch"),))
    assert samples[latency] == 4
    # Bounded label sets only: per node at most, nothing per device or pod unless asked for.
    labels = {name for _, pairs in samples for name, _ in pairs}
    assert labels <= {"kind", "outcome", "resource", "health", "le", "node", "route", "method",
                      "status", "version"}, labels  # fmt: skip
    assert "gpu-0" not in response.text and '"p"' not in response.text


OPENMETRICS = "application/openmetrics-text; version=1.0.0"


@pytest.mark.parametrize(
    ("accept", "content_type"),
    [
        (None, "text/plain; version=0.0.4"),
        ("text/plain", "text/plain; version=0.0.4"),
        (f"{OPENMETRICS},text/plain;q=0.5", OPENMETRICS),
    ],
)
def test_metrics_format_follows_the_accept_header(
    api: Api, accept: str | None, content_type: str
) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1", "Unhealthy")], 1))
    headers = {"Accept": accept} if accept else {}
    response = api.client.get("/metrics", headers=headers)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(content_type)
    assert "Accept" in response.headers["vary"]
    if content_type == OPENMETRICS:
        assert response.text.endswith("# EOF\n")
        families = {f.name: f for f in openmetrics_families(response.text)}
        # OpenMetrics names a counter's family without _total; its samples keep it.
        ingests = families["devicedeck_ingest_snapshots"]
        assert ingests.type == "counter"
        assert {s.name for s in ingests.samples} >= {"devicedeck_ingest_snapshots_total"}
    else:
        assert "# EOF" not in response.text
        families = {f.name: f for f in text_string_to_metric_families(response.text)}
    healthy = [s for s in families["devicedeck_devices"].samples if s.labels["health"] == "Healthy"]
    assert [s.value for s in healthy] == [1]


def test_openapi_documents_ingest_bodies_with_working_examples(api: Api) -> None:
    docs = api.client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    schema = api.client.get("/openapi.json").json()
    examples: list[dict[str, Any]] = []
    for path in ("/api/v1/ingest/listandwatch", "/api/v1/ingest/podresources"):
        content = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        found = content["examples"]
        assert found, path
        examples.extend(example["value"] for example in found.values())
    for example in examples:
        path = "listandwatch" if "devices" in example else "podresources"
        result = api.post(f"/api/v1/ingest/{path}", example).json()
        assert result["changed"] is True
    [device] = api.devices(allocated="true")
    assert device["allocation"]["pod"]


def test_openapi_lists_every_error_status_a_route_answers(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    for path in ("/api/v1/devices", "/api/v1/nodes/{name}", "/api/v1/ingest/listandwatch"):
        operation = next(iter(schema["paths"][path].values()))
        assert {"401", "403", "422"} <= set(operation["responses"]), path
