"""Fixtures for the dashboard tests: an API helper that ingests snapshots, and page fetching
that returns parsed HTML."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from .dom import Element, parse

GPU = "example.com/gpu"
NIC = "example.com/nic"
OBSERVED_AT = "2026-12-02T12:00:00Z"

Json = dict[str, Any]
MakeToken = Callable[..., str]


def dev(device_id: str, health: str = "Healthy", numa: list[int] | None = None) -> Json:
    body: Json = {"ID": device_id, "health": health}
    if numa is not None:
        body["topology"] = {"nodes": [{"ID": n} for n in numa]}
    return body


def held(namespace: str, pod: str, container: str, resource: str, *ids: str) -> Json:
    return {
        "name": pod,
        "namespace": namespace,
        "containers": [
            {"name": container, "devices": [{"resource_name": resource, "device_ids": list(ids)}]}
        ],
    }


class Ingest:
    """Posts snapshots through the real API, numbering each stream's snapshots."""

    def __init__(self, client: TestClient | httpx.Client, headers: dict[str, str]) -> None:
        self.client = client
        self.headers = headers
        self.counters: dict[str, itertools.count[int]] = {}

    def _seq(self, stream: str) -> int:
        return next(self.counters.setdefault(stream, itertools.count(1)))

    def devices(self, node: str, devices: list[Json], resource: str = GPU) -> Json:
        body = {
            "node": node,
            "resource": resource,
            "source": {"boot_id": "boot-ui", "seq": self._seq(f"{node}/{resource}")},
            "observed_at": OBSERVED_AT,
            "plugin": {"endpoint": "plugin.sock", "version": "v1beta1"},
            "devices": devices,
        }
        response = self.client.post("/api/v1/ingest/listandwatch", json=body, headers=self.headers)
        assert response.status_code == 200, response.text
        result: Json = response.json()
        return result

    def pods(self, node: str, pods: list[Json]) -> Json:
        body = {
            "node": node,
            "source": {"boot_id": "boot-ui", "seq": self._seq(f"{node}/pods")},
            "observed_at": OBSERVED_AT,
            "pod_resources": pods,
        }
        response = self.client.post("/api/v1/ingest/podresources", json=body, headers=self.headers)
        assert response.status_code == 200, response.text
        result: Json = response.json()
        return result


@pytest.fixture
def ingest(client: TestClient, auth: dict[str, str]) -> Ingest:
    return Ingest(client, auth)


class Pages:
    """GETs pages as a signed-in browser would and parses them."""

    def __init__(self, client: TestClient, headers: dict[str, str]) -> None:
        self.client = client
        self.headers = headers

    def get(self, path: str, expect: int = 200, **headers: str) -> httpx.Response:
        response = self.client.get(path, headers={**self.headers, **headers})
        assert response.status_code == expect, (response.status_code, response.text[:2000])
        return response

    def dom(self, path: str, expect: int = 200, **headers: str) -> Element:
        return parse(self.get(path, expect, **headers).text)


@pytest.fixture
def pages(client: TestClient, auth: dict[str, str]) -> Pages:
    return Pages(client, auth)


def typical_cluster(ingest: Ingest) -> None:
    """Two nodes: node-a with four GPUs on two NUMA nodes (one unhealthy, two held by a pod)
    and two NICs; node-b with two GPUs, one held."""
    ingest.devices(
        "node-a",
        [
            dev("gpu-0", numa=[0]),
            dev("gpu-1", numa=[0]),
            dev("gpu-2", "Unhealthy", numa=[1]),
            dev("gpu-10", numa=[1]),
        ],
    )
    ingest.devices("node-a", [dev("nic-0"), dev("nic-1")], resource=NIC)
    ingest.devices("node-b", [dev("gpu-0", numa=[0]), dev("gpu-1", numa=[0])])
    ingest.pods(
        "node-a",
        [held("ml", "trainer-0", "main", GPU, "gpu-0", "gpu-1"), held("web", "idle", "app", NIC)],
    )
    ingest.pods("node-b", [held("ml", "trainer-1", "worker", GPU, "gpu-1")])
