"""Snapshots posted at the same time over real HTTP to a real server leave a consistent state."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from .conftest import GPU, dev, held, listandwatch, pod, podresources

LAW = "/api/v1/ingest/listandwatch"
PODRES = "/api/v1/ingest/podresources"


@pytest.fixture
def http(server_url: str, auth: dict[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server_url, headers=auth, timeout=60) as client:
        yield client


def post_together(http: httpx.Client, requests: list[tuple[str, Any]]) -> list[httpx.Response]:
    """Send every request at the same moment from its own thread."""
    barrier = threading.Barrier(len(requests))

    def send(item: tuple[str, Any]) -> httpx.Response:
        barrier.wait(timeout=30)
        return http.post(item[0], json=item[1])

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        return list(pool.map(send, requests))


def all_devices(http: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    response = http.get("/api/v1/devices", params={"limit": 1000, "state": "any", **params})
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def events(http: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    response = http.get("/api/v1/events", params={"limit": 1000, **params})
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def test_two_snapshots_for_one_node_at_once_apply_in_seq_order(http: httpx.Client) -> None:
    for round_ in range(6):
        older = listandwatch("node-a", [dev(f"old-{round_}"), dev("shared")], 2 * round_ + 1)
        newer = listandwatch(
            "node-a", [dev(f"new-{round_}"), dev("shared", "Unhealthy")], 2 * round_ + 2
        )
        pair = [(LAW, older), (LAW, newer)] if round_ % 2 else [(LAW, newer), (LAW, older)]
        responses = post_together(http, pair)
        statuses = sorted(r.status_code for r in responses)
        assert statuses in ([200, 200], [200, 409]), [r.text for r in responses]
        for response in responses:
            if response.status_code == 409:
                assert response.json()["error"]["code"] == "stale_snapshot"
        # Whatever order they landed in, the newer seq is what stands.
        present = sorted(
            d["device_id"] for d in all_devices(http, node="node-a") if d["state"] == "present"
        )
        assert present == sorted([f"new-{round_}", "shared"])
    identities = [(d["node"], d["resource"], d["device_id"]) for d in all_devices(http)]
    assert len(identities) == len(set(identities))
    assert Counter(e["kind"] for e in events(http))["node_added"] == 1


def test_the_same_snapshot_twice_at_once_is_applied_once(http: httpx.Client) -> None:
    body = listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1)
    responses = post_together(http, [(LAW, body), (LAW, body), (LAW, body)])
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert sorted(r.json()["duplicate"] for r in responses) == [False, True, True]
    assert Counter(e["kind"] for e in events(http)) == {"node_added": 1, "device_added": 2}


def test_one_seq_with_two_contents_at_once_one_wins(http: httpx.Client) -> None:
    first = listandwatch("node-a", [dev("gpu-0")], 1)
    second = listandwatch("node-a", [dev("gpu-9")], 1)
    responses = post_together(http, [(LAW, first), (LAW, second)])
    assert sorted(r.status_code for r in responses) == [200, 409]
    [winner] = [body for body, r in zip((first, second), responses, strict=True) if r.is_success]
    [device] = all_devices(http)
    assert device["device_id"] == winner["devices"][0]["ID"]


def test_new_node_seen_by_both_streams_at_once(http: httpx.Client) -> None:
    requests: list[tuple[str, Any]] = []
    for i in range(4):
        node = f"fresh-{i}"
        requests.append((LAW, listandwatch(node, [dev("gpu-0"), dev("gpu-1")], 1)))
        requests.append(
            (
                PODRES,
                podresources(node, [pod("p", containers={"c": [held(GPU, "gpu-1", "gpu-2")]})], 1),
            )
        )
    responses = post_together(http, requests)
    assert [r.status_code for r in responses] == [200] * len(requests), [r.text for r in responses]

    kinds = Counter((e["kind"], e["node"]) for e in events(http))
    for i in range(4):
        node = f"fresh-{i}"
        assert kinds[("node_added", node)] == 1
        devices = {d["device_id"]: d for d in all_devices(http, node=node)}
        assert sorted(devices) == ["gpu-0", "gpu-1", "gpu-2"]
        assert devices["gpu-1"]["allocation"]["pod"] == "p"
        assert devices["gpu-0"]["health"] == "Healthy"
        # gpu-2 is only known from PodResources: Unknown, whichever snapshot came first.
        assert devices["gpu-2"]["health"] == "Unknown"
        assert devices["gpu-1"]["health"] == "Healthy"
    nodes = http.get("/api/v1/nodes", params={"limit": 1000}).json()
    assert nodes["count"] == 4


def test_many_nodes_at_once(http: httpx.Client) -> None:
    requests: list[tuple[str, Any]] = [
        (LAW, listandwatch(f"node-{i}", [dev(f"gpu-{j}") for j in range(8)], 1)) for i in range(8)
    ]
    responses = post_together(http, requests)
    assert [r.status_code for r in responses] == [200] * 8, [r.text for r in responses]
    response = http.get("/api/v1/devices", params={"limit": 1})
    assert response.json()["count"] == 64
    assert Counter(e["kind"] for e in events(http)) == {"node_added": 8, "device_added": 64}
