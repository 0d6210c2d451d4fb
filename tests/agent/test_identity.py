"""The source an agent puts on its snapshots orders them across its boots: an agent that was
replaced, and still sends (or retries) after its successor, changes nothing in the service."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient

from devicedeck.agent.identity import SourceIdentity

LAW = "/api/v1/ingest/listandwatch"
GPU = "example.com/gpu"


def snapshot(identity: SourceIdentity, health: str) -> dict[str, Any]:
    return {
        "node": "node-a",
        "resource": GPU,
        "source": identity.next_source(),
        "observed_at": "2026-12-05T08:00:00Z",
        "devices": [{"ID": "gpu-0", "health": health}],
    }


def test_a_replaced_agents_snapshot_after_its_successors_is_late(
    client: TestClient, make_token: Callable[..., str]
) -> None:
    headers = {"Authorization": f"Bearer {make_token('ingest', 'read', node='node-a')}"}

    def post(identity: SourceIdentity, health: str) -> dict[str, Any]:
        response = client.post(LAW, json=snapshot(identity, health), headers=headers)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def health() -> str:
        devices = client.get("/api/v1/devices", params={"node": "node-a"}, headers=headers)
        (device,) = devices.json()["results"]
        return str(device["health"])

    replaced = SourceIdentity("kernel-1", started_at=1_764_900_000.0)
    successor = SourceIdentity(
        "kernel-1", started_at=1_764_900_060.0, clock=lambda: 1_764_900_120.0
    )
    post(replaced, "Healthy")
    assert post(successor, "Unhealthy")["health_changes"] == 1
    assert post(replaced, "Healthy")["late"] is True
    assert health() == "Unhealthy"
    # A new sequence of the successor (after a 409) begins later still: it is applied.
    successor.resync()
    assert post(successor, "Healthy")["health_changes"] == 1
    assert post(replaced, "Unhealthy")["late"] is True
    assert health() == "Healthy"
