"""/metrics: per-node gauges from the shared counters, opt-in per-device health, requests by
route template, the build; every replica reports the same fleet."""

from __future__ import annotations

import re
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from devicedeck import __version__
from devicedeck.config import Settings
from devicedeck.inventory.models import Node

from .conftest import GPU, NIC, Api, MakeApi, StatementCounter, dev, held, listandwatch, pod
from .conftest import podresources as podresources_snapshot

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Every scrape reads the database: these tests are about what a read shows. Answering
    scrapes from a read renewed in the background has its tests in test_metrics_renewal.py."""
    return settings.model_copy(update={"metrics_refresh": 0})


def scrape(api: Api) -> Samples:
    response = api.client.get("/metrics")
    assert response.status_code == 200, response.text
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def series(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in samples.items() if n == name}


def node_devices(samples: Samples, node: str, resource: str) -> dict[str, float]:
    return {
        dict(labels)["health"]: value
        for labels, value in series(samples, "devicedeck_node_devices").items()
        if dict(labels)["node"] == node and dict(labels)["resource"] == resource
    }


def allocated(samples: Samples, node: str, resource: str) -> float:
    key = (("node", node), ("resource", resource))
    return series(samples, "devicedeck_node_devices_allocated")[key]


def per_node(samples: Samples, name: str) -> dict[str, float]:
    return {dict(labels)["node"]: value for labels, value in series(samples, name).items()}


def fill(api: Api) -> None:
    """node-a: three GPUs (one unhealthy, one held by ml/trainer), one removed GPU, a NIC;
    node-b: one GPU."""
    api.ingest_listandwatch(
        listandwatch(
            "node-a", [dev("gpu-0"), dev("gpu-1", "Unhealthy"), dev("gpu-2"), dev("gpu-9")], 1
        )
    )
    api.ingest_listandwatch(
        listandwatch("node-a", [dev("gpu-0"), dev("gpu-1", "Unhealthy"), dev("gpu-2")], 2)
    )
    api.ingest_listandwatch(listandwatch("node-a", [dev("nic-0")], 3, resource=NIC))
    api.ingest_podresources(
        podresources_snapshot(
            "node-a", [pod("trainer", containers={"main": [held(GPU, "gpu-1")]})], 4
        )
    )
    api.ingest_listandwatch(listandwatch("node-b", [dev("gpu-0")], 1))


def test_node_gauges_count_present_devices_by_health_and_holder(api: Api) -> None:
    before = time.time()
    fill(api)
    after = time.time()
    samples = scrape(api)

    assert node_devices(samples, "node-a", GPU) == {"Healthy": 2, "Unhealthy": 1, "Unknown": 0}
    assert node_devices(samples, "node-a", NIC) == {"Healthy": 1, "Unhealthy": 0, "Unknown": 0}
    assert node_devices(samples, "node-b", GPU) == {"Healthy": 1, "Unhealthy": 0, "Unknown": 0}
    assert node_devices(samples, "node-b", NIC) == {}
    assert allocated(samples, "node-a", GPU) == 1
    assert allocated(samples, "node-a", NIC) == 0
    assert allocated(samples, "node-b", GPU) == 0
    assert per_node(samples, "devicedeck_node_stale") == {"node-a": 0, "node-b": 0}
    seen = per_node(samples, "devicedeck_node_last_seen_timestamp_seconds")
    assert set(seen) == {"node-a", "node-b"}
    assert all(before - 1 <= value <= after + 1 for value in seen.values()), (before, seen)
    # The fleet totals agree with the per-node gauges.
    assert samples[("devicedeck_devices", (("health", "Healthy"), ("resource", GPU)))] == 3
    assert samples[("devicedeck_devices", (("health", "Unhealthy"), ("resource", GPU)))] == 1
    assert samples[("devicedeck_build_info", (("version", __version__),))] == 1
    # Off by default: no series per device, so no device ID or pod name anywhere.
    assert not series(samples, "devicedeck_device_healthy")
    text = api.client.get("/metrics").text
    assert "gpu-1" not in text and "trainer" not in text


def test_every_replica_reports_the_fleet_and_a_stale_node_reads_unknown(
    api: Api, make_api: MakeApi
) -> None:
    fill(api)
    other = make_api()  # another replica on the same database, that ingested nothing
    mine, theirs = scrape(api), scrape(other)
    for name in (
        "devicedeck_node_devices",
        "devicedeck_node_devices_allocated",
        "devicedeck_node_stale",
        "devicedeck_devices",
    ):
        assert series(theirs, name) == series(mine, name), name

    # A replica whose stale-after has passed for every node: all their devices are Unknown.
    strict = scrape(make_api(stale_after=0.001, metrics_per_device=True))
    assert per_node(strict, "devicedeck_node_stale") == {"node-a": 1, "node-b": 1}
    assert node_devices(strict, "node-a", GPU) == {"Healthy": 0, "Unhealthy": 0, "Unknown": 3}
    assert allocated(strict, "node-a", GPU) == 1
    assert samples_of(strict, "devicedeck_devices") == {(GPU, "Unknown"): 4, (NIC, "Unknown"): 1}
    # A stale node's devices have no series of their own; devicedeck_node_stale says why.
    assert not series(strict, "devicedeck_device_healthy")


def test_each_scrape_shows_the_counts_as_they_are_then(
    api: Api, session_factory: sessionmaker[Session]
) -> None:
    """A node's lines are kept from one scrape to the next: a change must still show."""
    fill(api)
    first = scrape(api)
    assert node_devices(first, "node-b", GPU) == {"Healthy": 1, "Unhealthy": 0, "Unknown": 0}
    api.ingest_listandwatch(listandwatch("node-b", [dev("gpu-0", "Unhealthy"), dev("gpu-1")], 2))
    api.ingest_listandwatch(listandwatch("node-a", [], 5, resource=NIC))
    second = scrape(api)
    assert node_devices(second, "node-b", GPU) == {"Healthy": 1, "Unhealthy": 1, "Unknown": 0}
    assert node_devices(second, "node-a", NIC) == {}  # no present NIC left: no series
    assert node_devices(second, "node-a", GPU) == node_devices(first, "node-a", GPU)
    assert samples_of(second, "devicedeck_devices") == {
        (GPU, "Healthy"): 3,
        (GPU, "Unhealthy"): 2,
    }
    third = scrape(api)
    for name in ("devicedeck_node_devices", "devicedeck_node_stale", "devicedeck_devices"):
        assert series(third, name) == series(second, name), name
    # A node deleted by hand (its devices and counters go with it) leaves every family.
    with session_factory() as session:
        session.execute(delete(Node).where(Node.name == "node-b"))
        session.commit()
    fourth = scrape(api)
    assert set(per_node(fourth, "devicedeck_node_stale")) == {"node-a"}
    assert node_devices(fourth, "node-b", GPU) == {}
    assert samples_of(fourth, "devicedeck_devices") == {(GPU, "Healthy"): 2, (GPU, "Unhealthy"): 1}


def samples_of(samples: Samples, name: str) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["resource"], dict(labels)["health"]): value
        for labels, value in series(samples, name).items()
    }


def test_per_device_health_names_the_holder_when_switched_on(api: Api, make_api: MakeApi) -> None:
    fill(api)
    samples = scrape(make_api(metrics_per_device=True))
    found = {
        (labels["node"], labels["resource"], labels["device"]): (
            value,
            labels["namespace"],
            labels["pod"],
        )
        for key, value in series(samples, "devicedeck_device_healthy").items()
        for labels in [dict(key)]
    }
    assert found == {
        ("node-a", GPU, "gpu-0"): (1, "", ""),
        ("node-a", GPU, "gpu-1"): (0, "ml", "trainer"),
        ("node-a", GPU, "gpu-2"): (1, "", ""),
        ("node-a", NIC, "nic-0"): (1, "", ""),
        ("node-b", GPU, "gpu-0"): (1, "", ""),
    }  # gpu-9 was removed: no series


def test_a_scrape_sends_the_same_statements_however_large_the_fleet(
    quiet_api: Api, statements: StatementCounter
) -> None:
    def count() -> int:
        with statements:
            quiet_api.client.get("/metrics")
        return statements.count

    fill(quiet_api)
    few = count()
    for n in range(12):
        quiet_api.ingest_listandwatch(
            listandwatch(f"more-{n}", [dev(f"gpu-{i}") for i in range(5)], 1)
        )
    assert count() == few
    # One query (SQLite's driver adds an explicit BEGIN).
    assert [s for s in statements.statements if s != "BEGIN"] == [statements.statements[-1]]


def test_requests_are_counted_and_timed_by_route_template(api: Api) -> None:
    fill(api)
    ids = [d["id"] for d in api.devices(node="node-a")]
    for device_id in ids:
        api.get(f"/api/v1/devices/{device_id}")
    api.get("/api/v1/devices/999999", expect=404)
    api.client.get("/no/such/page/ddk-probe")
    assert api.client.delete(f"/api/v1/devices/{ids[0]}", headers=api.headers).status_code == 405
    oversized = "x" * (api.client.app.state.settings.body_limit + 1)  # type: ignore[attr-defined]
    refused = api.client.post(
        "/api/v1/ingest/listandwatch",
        content=oversized,
        headers={**api.headers, "Content-Type": "application/json"},
    )
    assert refused.status_code == 413
    samples = scrape(api)

    requests = {
        (labels["route"], labels["method"], labels["status"]): value
        for key, value in series(samples, "devicedeck_http_requests_total").items()
        for labels in [dict(key)]
    }
    assert requests[("/api/v1/devices/{id}", "GET", "200")] == len(ids)
    assert requests[("/api/v1/devices/{id}", "GET", "404")] == 1
    assert requests[("unmatched", "GET", "404")] == 1
    # Refused before any route ran, still named by its route.
    assert requests[("/api/v1/ingest/listandwatch", "POST", "413")] == 1
    assert requests[("/api/v1/ingest/listandwatch", "POST", "200")] == 4
    assert requests[("/api/v1/ingest/podresources", "POST", "200")] == 1
    # A path that exists for other methods.
    assert requests[("/api/v1/devices/{id}", "DELETE", "405")] == 1
    timed = ("devicedeck_http_request_duration_seconds_count",)
    count = samples[(*timed, (("method", "GET"), ("route", "/api/v1/devices/{id}")))]
    assert count == len(ids) + 1
    # Raw paths never become labels.
    routes = {route for route, _, _ in requests}
    assert not any(re.search(r"/\d", route) for route in routes), routes
    assert not any("ddk-probe" in route or "999999" in route for route in routes)
