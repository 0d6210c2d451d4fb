"""The agent's own /metrics over real HTTP: the Prometheus text format by default, OpenMetrics
when the scraper asks for it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from devicedeck.agent.metrics import AgentMetrics, MetricsServer


@pytest.fixture
def served() -> Iterator[tuple[str, AgentMetrics]]:
    metrics = AgentMetrics()
    metrics.snapshots_sent.labels(kind="podresources").inc(3)
    server = MetricsServer("127.0.0.1", 0, metrics, lambda: (True, {}))
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}", metrics
    finally:
        server.stop()


def test_text_format_by_default(served: tuple[str, AgentMetrics]) -> None:
    url, _ = served
    for headers in ({}, {"Accept": "text/plain"}):
        response = httpx.get(url + "/metrics", headers=headers, timeout=10)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert response.headers["vary"] == "Accept"
        families = {f.name: f for f in text_string_to_metric_families(response.text)}
        [sent] = families["devicedeck_agent_snapshots_sent"].samples
        assert sent.labels == {"kind": "podresources"} and sent.value == 3


def test_openmetrics_when_asked_for(served: tuple[str, AgentMetrics]) -> None:
    url, _ = served
    accept = "application/openmetrics-text; version=1.0.0; charset=utf-8,text/plain;q=0.5"
    response = httpx.get(url + "/metrics", headers={"Accept": accept}, timeout=10)
    assert response.status_code == 200
    content_type = response.headers["content-type"]
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    assert response.text.endswith("# EOF\n")
    families = {f.name: f for f in openmetrics_families(response.text)}
    sent = families["devicedeck_agent_snapshots_sent"]
    assert sent.type == "counter"
    assert [(s.name, s.value) for s in sent.samples if s.name.endswith("_total")] == [
        ("devicedeck_agent_snapshots_sent_total", 3)
    ]
