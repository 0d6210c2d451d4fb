"""What a PodResources snapshot replaces is read by node, devices and current allocations
apart: allocations on devices the snapshot no longer names still end."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.db import write_session
from devicedeck.kube.pod_sync import apply_pod_event

from .conftest import (
    GPU,
    NIC,
    Api,
    StatementCounter,
    dev,
    held,
    holding_a_claim,
    listandwatch,
    pod,
    podresources,
)


def test_a_hold_on_a_removed_device_of_a_resource_no_longer_named_ends(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("g0"), dev("g1")], 1))
    api.ingest_listandwatch(listandwatch("node-a", [dev("n0")], 1, resource=NIC))
    holds = {"main": [held(GPU, "g0")], "side": [held(NIC, "n0")]}
    first = api.ingest_podresources(podresources("node-a", [pod("p", containers=holds)], 1))
    assert first["allocated"] == 2
    # The GPU plugin stops listing g0 while the pod still holds it.
    assert api.ingest_listandwatch(listandwatch("node-a", [dev("g1")], 2))["removed"] == 1
    # The next snapshot names neither GPUs nor the NIC: both holds end.
    result = api.ingest_podresources(podresources("node-a", [], 2))
    assert (result["released"], result["allocated"]) == (2, 0)
    released = {(e["resource"], e["device_id"]) for e in api.events(kind="released")}
    assert released == {(GPU, "g0"), (NIC, "n0")}
    assert api.get("/api/v1/pods/ml/p")["running"] is False
    # And a hold on it again starts a new allocation of the same device.
    again = api.ingest_podresources(
        podresources("node-a", [pod("q", containers={"main": [held(GPU, "g0")]})], 3)
    )
    assert (again["allocated"], again["added"]) == (1, 0)


def test_two_containers_and_two_pods_on_one_node_keep_their_holds_apart(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-b", [dev(f"g{i}") for i in range(4)], 1))
    pods = [
        pod("p", containers={"a": [held(GPU, "g0")], "b": [held(GPU, "g1")]}),
        pod("q", namespace="serving", containers={"a": [held(GPU, "g2")]}),
    ]
    assert api.ingest_podresources(podresources("node-b", pods, 1))["allocated"] == 3
    # Container b moves to g3; q keeps g2; p's container a keeps g0.
    pods[0] = pod("p", containers={"a": [held(GPU, "g0")], "b": [held(GPU, "g3")]})
    result = api.ingest_podresources(podresources("node-b", pods, 2))
    assert (result["released"], result["allocated"]) == (1, 1)
    [released] = api.events(kind="released")
    assert (released["pod"], released["container"], released["device_id"]) == ("p", "b", "g1")
    holders = {
        d["device_id"]: (d["allocation"] or {}).get("pod") for d in api.devices(node="node-b")
    }
    assert holders == {"g0": "p", "g1": None, "g2": "q", "g3": "p"}


def claim(name: str, device: str) -> dict[str, Any]:
    return {
        "claim_name": name,
        "claim_namespace": "ml",
        "claim_resources": [
            {"driver_name": "gpu.example.com", "pool_name": "node-c", "device_name": device}
        ],
    }


def test_claims_on_a_node_with_devices_start_and_end(api: Api) -> None:
    """The read that finds the node's devices also tells whether it holds claims: a snapshot
    without claims still ends the ones it held."""
    api.ingest_listandwatch(listandwatch("node-c", [dev("g0"), dev("g1")], 1))
    plain = pod("p", containers={"main": [held(GPU, "g0")]})
    with_claims = {
        **pod("q"),
        "containers": [
            {"name": "main", "devices": [], "dynamic_resources": [claim("c1", "dra-0")]},
            {"name": "side", "devices": [held(GPU, "g1")], "dynamic_resources": []},
        ],
    }
    assert api.ingest_podresources(podresources("node-c", [plain], 1))["allocated"] == 1
    started = api.ingest_podresources(podresources("node-c", [plain, with_claims], 2))
    assert (started["allocated"], started["released"]) == (2, 0)
    assert api.ingest_podresources(podresources("node-c", [plain], 3))["released"] == 2
    assert {e["kind"] for e in api.events(kind="claim_released")} == {"claim_released"}
    [released] = api.events(kind="claim_released")
    assert (released["pod"], released["device_id"]) == ("q", "gpu.example.com/node-c/dra-0")
    assert api.get("/api/v1/pods/ml/q")["running"] is False
    # No claims held any more, and none listed: only the plugin devices' holds change.
    other = pod("r", containers={"main": [held(GPU, "g1")]})
    result = api.ingest_podresources(podresources("node-c", [plain, other], 4))
    assert (result["allocated"], result["released"]) == (1, 0)
    assert len(api.events(kind="claim_released")) == 1


def test_a_new_nodes_snapshot_sends_no_statement_per_pod_or_device(
    quiet_api: Api, statements: StatementCounter
) -> None:
    """Devices first named by the snapshot, allocations, allocatable sets and events go in a
    fixed number of statements however many pods and devices a new node's snapshot names. A
    pod holds a DRA claim, so that PostgreSQL too takes the session path, whose statements
    are counted here (without one, the driver's two round trips: test_podresources_driver)."""
    api = quiet_api
    sent: dict[int, list[str]] = {}
    for size in (2, 24):
        node = f"node-{size}"
        api.ingest_listandwatch(
            listandwatch(node, [dev(f"n{i}") for i in range(size)], 1, resource=NIC)
        )
        pods = [holding_a_claim("claims", node)]
        pods += [pod(f"job-{i}", containers={"main": [held(GPU, f"g{i}")]}) for i in range(size)]
        body = podresources(
            node,
            pods,
            1,
            allocatable={
                "devices": [
                    {"resource_name": GPU, "device_ids": [f"g{i}" for i in range(2 * size)]},
                    {"resource_name": NIC, "device_ids": [f"n{i}" for i in range(size)]},
                ]
            },
        )
        with statements:
            result = api.ingest_podresources(body)
        assert (result["added"], result["allocated"]) == (2 * size, size + 1)
        sent[size] = [s.split()[0].upper() for s in statements.statements]
    assert len(sent[24]) == len(sent[2]) > 0, sent


def _cluster_pod(name: str, uid: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ml", "name": name, "uid": uid},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "resources": {"limits": {GPU: "1"}}}],
        },
        "status": {"phase": "Running"},
    }


def test_a_snapshot_listing_a_deleted_pod_does_not_hold_its_device_again(
    api: Api, session_factory: sessionmaker[Session]
) -> None:
    """Ingested over HTTP (on PostgreSQL the snapshot's own statement path): after the
    cluster watcher saw the pod deleted, a snapshot that still lists it, without a UID or
    with the deleted pod's, leaves the device with the one hold that ended."""
    api.ingest_listandwatch(listandwatch("node-d", [dev("g0"), dev("g1")], 1))
    with write_session(session_factory) as session:
        apply_pod_event(session, "ADDED", _cluster_pod("p", "uid-p", "node-d"), utcnow())
    holding = [pod("p", containers={"main": [held(GPU, "g0")]})]
    assert api.ingest_podresources(podresources("node-d", holding, 1))["allocated"] == 1
    with write_session(session_factory) as session:
        apply_pod_event(session, "DELETED", _cluster_pod("p", "uid-p", "node-d"), utcnow())
    assert api.get("/api/v1/pods/ml/p")["running"] is False

    again = api.ingest_podresources(podresources("node-d", holding, 2))
    assert again["allocated"] == 0
    with_uid = [{**holding[0], "uid": "uid-p"}]
    assert api.ingest_podresources(podresources("node-d", with_uid, 3))["allocated"] == 0
    assert api.device("node-d", "g0")["allocation"] is None
    history = api.get(f"/api/v1/devices/{api.device('node-d', 'g0')['id']}")
    assert [(h["pod"], h["ended"] is not None) for h in history["allocation_history"]] == [
        ("p", True)
    ]
    # A new pod under the name, its UID listed, holds the device.
    new_uid = [{**holding[0], "uid": "uid-p2"}]
    assert api.ingest_podresources(podresources("node-d", new_uid, 4))["allocated"] == 1
