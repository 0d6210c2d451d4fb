"""devicedeck_device_unhealthy_transitions_total: the times devices turned Unhealthy, per node
and resource from the shared counters, or per device when per-device series are on; a counter
in both exposition formats."""

from __future__ import annotations

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from devicedeck.config import Settings

from .conftest import GPU, NIC, Api, MakeApi, dev, listandwatch

FLAPS = "devicedeck_device_unhealthy_transitions"
OPENMETRICS = "application/openmetrics-text; version=1.0.0"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"metrics_refresh": 0})


def flaps(api: Api, openmetrics: bool = False) -> dict[tuple[tuple[str, str], ...], float]:
    headers = {"Accept": OPENMETRICS} if openmetrics else {}
    response = api.client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    parse = openmetrics_families if openmetrics else text_string_to_metric_families
    [family] = [f for f in parse(response.text) if f.name == FLAPS]
    assert family.type == "counter"
    return {
        tuple(sorted(s.labels.items())): s.value
        for s in family.samples
        if s.name == FLAPS + "_total"
    }


def flap(api: Api) -> None:
    """On node-a, gpu-0 turns Unhealthy twice and gpu-1 once, then gpu-1 is removed; gpu-2
    arrives Unhealthy (it never turned so); a NIC stays healthy."""
    states = [
        {"gpu-0": "Healthy", "gpu-1": "Healthy"},
        {"gpu-0": "Unhealthy", "gpu-1": "Unhealthy"},
        {"gpu-0": "Healthy", "gpu-1": "Healthy"},
        {"gpu-0": "Unhealthy", "gpu-2": "Unhealthy"},
        {"gpu-0": "Unhealthy", "gpu-2": "Unhealthy"},
    ]
    for seq, state in enumerate(states, start=1):
        devices = [dev(device, health) for device, health in state.items()]
        api.ingest_listandwatch(listandwatch("node-a", devices, seq))
    api.ingest_listandwatch(listandwatch("node-a", [dev("nic-0")], 10, resource=NIC))


def test_flaps_are_counted_per_node_and_resource_removed_devices_included(api: Api) -> None:
    flap(api)
    expected = {
        (("node", "node-a"), ("resource", GPU)): 3.0,
        (("node", "node-a"), ("resource", NIC)): 0.0,
    }
    assert flaps(api) == expected
    assert flaps(api, openmetrics=True) == expected


def test_per_device_series_replace_the_per_node_ones_when_switched_on(
    api: Api, make_api: MakeApi
) -> None:
    flap(api)
    per_device = make_api(metrics_per_device=True)
    expected = {
        (("device", "gpu-0"), ("node", "node-a"), ("resource", GPU)): 2.0,
        (("device", "gpu-2"), ("node", "node-a"), ("resource", GPU)): 0.0,
        (("device", "nic-0"), ("node", "node-a"), ("resource", NIC)): 0.0,
    }  # gpu-1 was removed: no series
    assert flaps(per_device) == expected
    assert flaps(per_device, openmetrics=True) == expected


def test_the_watch_list_shows_how_often_a_marked_device_flapped(api: Api) -> None:
    flap(api)
    pk = api.device("node-a", "gpu-0")["id"]
    marked = api.client.put(f"/api/v1/watchlist/{pk}", json={}, headers=api.headers)
    assert marked.json()["unhealthy_transitions"] == 2
