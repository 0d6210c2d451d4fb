"""Pods from the API server: joined to allocations, deletion ends them, KEP-4680 health."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from devicedeck.clock import utcnow
from devicedeck.db import write_session
from devicedeck.inventory.models import Allocation
from devicedeck.kube.pod_sync import apply_pod_list, join_allocations

from .conftest import Factory, StartApp, ingest_allocations, ingest_devices, wait_for
from .fake_apiserver import FakeApiServer
from .objects import node, pod

GPU = "example.com/gpu"


def _get(client: TestClient, auth: dict[str, str], url: str) -> Any:
    response = client.get(url, headers=auth)
    return response.json() if response.status_code == 200 else None


def _device(client: TestClient, auth: dict[str, str], device_id: str) -> dict[str, Any]:
    page = _get(client, auth, f"/api/v1/devices?q={device_id}&node=node-a")
    return next(d for d in page["results"] if d["device_id"] == device_id)


def test_pod_uid_joins_allocations_and_deletion_ends_them(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str], session_factory: Factory
) -> None:
    ingest_devices(session_factory, "node-a", GPU, {"gpu-0": "Healthy", "gpu-1": "Healthy"})
    ingest_allocations(session_factory, "node-a", [("ml", "trainer-0", GPU, ["gpu-0", "gpu-1"])])
    fake_api.put("nodes", node("node-a", capacity={GPU: "2"}))
    fake_api.put(
        "pods",
        pod("ml", "trainer-0", node_name="node-a", limits={GPU: "2"}, uid="uid-trainer-0"),
    )
    # A pod without extended resources is not stored.
    fake_api.put("pods", pod("ml", "web-0", node_name="node-a", uid="uid-web-0"))
    client = start_app()

    held = wait_for(
        lambda: (p := _get(client, auth, "/api/v1/pods/ml/trainer-0")) and p["uid"] and p,
        what="the pod's UID on its allocations",
    )
    assert held["uid"] == "uid-trainer-0"
    listed = _get(client, auth, "/api/v1/cluster/pods")
    assert listed["count"] == 1
    (trainer,) = listed["results"]
    assert trainer["phase"] == "Running"
    assert trainer["owner"] == {"kind": "ReplicaSet", "name": "trainer-5d8f"}
    assert trainer["labels"] == {"app": "trainer"}
    assert trainer["requests"] == {GPU: 2}
    assert sorted(d["device_id"] for d in trainer["devices"]) == ["gpu-0", "gpu-1"]

    fake_api.delete("pods", "trainer-0", namespace="ml")
    wait_for(
        lambda: _get(client, auth, "/api/v1/pods/ml/trainer-0")["running"] is False,
        what="the deleted pod's allocations to end",
    )
    released = _get(client, auth, "/api/v1/events?kind=released&pod=trainer-0")["results"]
    assert sorted(e["device_id"] for e in released) == ["gpu-0", "gpu-1"]
    assert {e["actor"] for e in released} == {"kube-watcher"}
    history = _get(client, auth, f"/api/v1/devices/{_device(client, auth, 'gpu-0')['id']}")
    (period,) = history["allocation_history"]
    assert period["pod_uid"] == "uid-trainer-0"
    assert period["ended"] is not None
    assert _device(client, auth, "gpu-0")["allocation"] is None
    gone = _get(client, auth, "/api/v1/cluster/pods?deleted=true")["results"]
    assert [(p["name"], p["deleted_at"] is not None) for p in gone] == [("trainer-0", True)]


def test_allocated_resources_status_sets_device_health(
    fake_api: FakeApiServer, start_app: StartApp, auth: dict[str, str], session_factory: Factory
) -> None:
    ingest_devices(session_factory, "node-a", GPU, {"gpu-0": "Healthy", "gpu-1": "Healthy"})
    ingest_allocations(session_factory, "node-a", [("ml", "trainer-0", GPU, ["gpu-0"])])
    fake_api.put("nodes", node("node-a", capacity={GPU: "2"}))
    client = start_app()
    wait_for(lambda: _get(client, auth, "/api/v1/cluster/status")["healthy"], what="watching")

    fake_api.put(
        "pods",
        pod(
            "ml",
            "trainer-0",
            node_name="node-a",
            limits={GPU: "1"},
            health={GPU: {"gpu-0": "Unhealthy"}},
        ),
    )
    device = wait_for(
        lambda: (d := _device(client, auth, "gpu-0"))["health"] == "Unhealthy" and d,
        what="gpu-0 unhealthy from pod status",
    )
    assert device["health_source"] == "pod_status"
    assert _device(client, auth, "gpu-1")["health"] == "Healthy"
    (event,) = _get(client, auth, "/api/v1/events?kind=health_changed")["results"]
    assert event["actor"] == "kube-watcher"
    assert event["after"]["health_source"] == "pod_status"

    # The plugin's stream owns the row: its next snapshot, even with the same content as
    # before, is applied in full and brings its own view back.
    ingest_devices(session_factory, "node-a", GPU, {"gpu-0": "Healthy", "gpu-1": "Healthy"}, 2)
    device = _device(client, auth, "gpu-0")
    assert (device["health"], device["health_source"]) == ("Healthy", "plugin")


def test_allocations_reported_after_their_pod_get_its_uid(session_factory: Factory) -> None:
    now = utcnow()
    ingest_devices(session_factory, "node-a", GPU, {"gpu-0": "Healthy", "gpu-1": "Healthy"})
    with write_session(session_factory) as session:
        apply_pod_list(
            session,
            [
                pod("ml", "a", node_name="node-a", limits={GPU: "1"}, uid="uid-a"),
                # Same name as a pod on node-a, but bound elsewhere: not the same pod.
                pod("ml", "b", node_name="node-b", limits={GPU: "1"}, uid="uid-b-elsewhere"),
            ],
            now,
        )
    ingest_allocations(
        session_factory, "node-a", [("ml", "a", GPU, ["gpu-0"]), ("ml", "b", GPU, ["gpu-1"])]
    )
    with write_session(session_factory) as session:
        join_allocations(session)
    with session_factory() as session:
        uids = session.execute(
            select(Allocation.pod, Allocation.pod_uid).order_by(Allocation.pod)
        ).all()
    assert uids == [("a", "uid-a"), ("b", None)]


def _holds(factory: Factory) -> list[tuple[str, str | None, str, bool]]:
    """Every hold ever recorded: (pod, pod UID, device ID, still open), in order."""
    with factory() as session:
        rows = session.execute(
            select(
                Allocation.pod, Allocation.pod_uid, Allocation.device_id, Allocation.ended
            ).order_by(Allocation.id)
        )
        return [(pod_, uid, device, ended is None) for pod_, uid, device, ended in rows]


def test_a_deleted_pod_still_listed_by_the_kubelet_keeps_one_ended_hold(
    session_factory: Factory,
) -> None:
    """The watcher ends a deleted pod's holds; the kubelet lists the pod until it has cleaned
    up after it, and a snapshot taken before the deletion can arrive after it. Such a snapshot
    does not open a second hold of the same device for the same pod; a pod re-created under
    the name (a new UID) does hold again, even when the kubelet's list did not change."""
    ingest_devices(session_factory, "node-a", GPU, {"gpu-0": "Healthy", "gpu-1": "Healthy"})
    held = [("ml", "p", GPU, ["gpu-0"])]
    ingest_allocations(session_factory, "node-a", held, seq=1)
    with write_session(session_factory) as session:
        apply_pod_list(
            session, [pod("ml", "p", node_name="node-a", limits={GPU: "1"}, uid="uid-p")], utcnow()
        )
    with write_session(session_factory) as session:
        apply_pod_list(session, [], utcnow())
    assert _holds(session_factory) == [("p", "uid-p", "gpu-0", False)]

    ingest_allocations(session_factory, "node-a", held, seq=2)
    assert _holds(session_factory) == [("p", "uid-p", "gpu-0", False)]
    both = [*held, ("ml", "q", GPU, ["gpu-1"])]
    ingest_allocations(session_factory, "node-a", both, seq=3)
    assert _holds(session_factory) == [
        ("p", "uid-p", "gpu-0", False),
        ("q", None, "gpu-1", True),
    ]

    with write_session(session_factory) as session:
        apply_pod_list(
            session, [pod("ml", "p", node_name="node-a", limits={GPU: "1"}, uid="uid-p2")], utcnow()
        )
    ingest_allocations(session_factory, "node-a", both, seq=4)
    assert [(p, d, open_) for p, _, d, open_ in _holds(session_factory)] == [
        ("p", "gpu-0", False),
        ("q", "gpu-1", True),
        ("p", "gpu-0", True),
    ]
