"""A changed PodResources snapshot on PostgreSQL goes on a pooled connection of the driver, in
two round trips, so SQLAlchemy sends none of its statements; on SQLite, and for what that path
does not carry (DRA claims, a repeat), the session path applies it. The outcome is the same."""

from __future__ import annotations

from collections.abc import Callable

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


def on_postgresql(statements: StatementCounter) -> bool:
    return statements.engine.dialect.name == "postgresql"


NEW_NODE_PODS = [
    pod("a", containers={"main": [held(GPU, "gpu-1", numa=[1])]}, uid="a-1"),
    pod("b", containers={"main": [held(GPU, "gpu-0")], "side": [held(NIC, "nic-0")]}),
]
NEW_NODE_ALLOCATABLE = {
    "allocatable": {
        "devices": [
            {"resource_name": GPU, "device_ids": ["gpu-0", "gpu-1", "gpu-2"]},
            {"resource_name": NIC, "device_ids": ["nic-0"]},
        ]
    }
}


def test_a_new_nodes_first_snapshot_creates_the_node_its_devices_and_allocations(
    quiet_api: Api, statements: StatementCounter
) -> None:
    """The node's row and node_added event, the devices no plugin has listed yet (health
    Unknown), the allocations on them and their events, in the session path's order."""
    api = quiet_api
    api.get("/api/v1/nodes")  # the token's lookup, before counting
    body = podresources("node-a", NEW_NODE_PODS, 1, **NEW_NODE_ALLOCATABLE)
    with statements:
        result = api.ingest_podresources(body)
    if on_postgresql(statements):
        assert statements.statements == []
    assert (result["added"], result["allocated"], result["events"]) == (4, 3, 8)
    events = api.events(node="node-a")
    in_order = sorted(events, key=lambda e: e["id"])
    assert [(e["kind"], e["device_id"], e["pod"]) for e in in_order] == [
        ("node_added", None, None),
        ("device_added", "gpu-0", None),
        ("device_added", "gpu-1", None),
        ("device_added", "gpu-2", None),
        ("device_added", "nic-0", None),
        ("allocated", "gpu-1", "a"),
        ("allocated", "gpu-0", "b"),
        ("allocated", "nic-0", "b"),
    ]
    gpu_1 = api.device("node-a", "gpu-1")
    assert (gpu_1["health"], gpu_1["numa_nodes"]) == ("Unknown", [1])
    assert [(h["pod"], h["pod_uid"], h["ended"]) for h in gpu_1["allocation_history"]] == [
        ("a", "a-1", None)
    ]
    assert api.device("node-a", "gpu-2")["allocation_history"] == []
    nic_0 = api.device("node-a", "nic-0", NIC)
    assert [h["container"] for h in nic_0["allocation_history"]] == ["side"]
    # Each device's events name its row, found by the statement that inserted it.
    assert {e["device_id"]: e["device"] for e in in_order if e["kind"] == "allocated"} == {
        "gpu-1": gpu_1["id"],
        "gpu-0": api.device("node-a", "gpu-0")["id"],
        "nic-0": nic_0["id"],
    }
    # The next snapshot finds the node known: no second node_added.
    api.ingest_podresources(podresources("node-a", NEW_NODE_PODS[:1], 2, **NEW_NODE_ALLOCATABLE))
    assert len(api.events(kind="node_added")) == 1
    assert len(api.events(kind="released")) == 2


def test_a_changed_snapshot_ends_starts_and_learns_uids(
    quiet_api: Api, statements: StatementCounter
) -> None:
    api = quiet_api
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1", "Bad")], 1))
    api.get("/api/v1/nodes")  # the token's lookup, before counting
    api.ingest_podresources(
        podresources("node-a", [pod("a", containers={"m": [held(GPU, "gpu-0")]})], 1)
    )
    changed = [
        pod("a", containers={"m": [held(GPU, "gpu-0")]}, uid="a-1"),
        pod("b", containers={"m": [held(GPU, "gpu-1")]}),
    ]
    with statements:
        result = api.ingest_podresources(podresources("node-a", changed, 2))
    if on_postgresql(statements):
        assert statements.statements == []
    assert (result["allocated"], result["released"], result["added"]) == (1, 0, 0)
    [allocated] = api.events(kind="allocated", pod="b")
    assert allocated["after"] == {"health": "Unhealthy"}
    gone = api.ingest_podresources(podresources("node-a", changed[1:], 3))
    assert (gone["allocated"], gone["released"]) == (0, 1)
    [released] = api.events(kind="released")
    assert (released["pod"], released["before"]["pod_uid"]) == ("a", "a-1")
    # The receipt moved to seq 3: the same snapshot again is a repeat.
    assert api.ingest_podresources(podresources("node-a", changed[1:], 3))["duplicate"] is True


def test_snapshots_with_dra_claims_take_the_full_path_and_are_applied(
    quiet_api: Api, statements: StatementCounter
) -> None:
    """A snapshot that lists a claim, and one from a node that holds claims, go to the session
    path, which reads and writes the claims."""
    api = quiet_api
    plain = pod("p", containers={"main": [held(GPU, "gpu-0")]})
    with statements:
        first = api.ingest_podresources(
            podresources("node-a", [plain, holding_a_claim("q", "node-a")], 1)
        )
    assert (first["added"], first["allocated"]) == (1, 2)
    assert any("claim_allocations" in s for s in statements.statements), statements.statements
    with statements:
        ended = api.ingest_podresources(podresources("node-a", [plain], 2))
    assert (ended["allocated"], ended["released"]) == (0, 1)
    assert any("claim_allocations" in s for s in statements.statements), statements.statements
    [released] = api.events(kind="claim_released")
    assert (released["pod"], released["device_id"]) == ("q", "gpu.example.com/node-a/dra-0")
    assert len(api.events(kind="node_added")) == 1
    # No claim open any more: the driver's connection again.
    with statements:
        again = api.ingest_podresources(podresources("node-a", [], 3))
    assert again["released"] == 1
    if on_postgresql(statements):
        assert statements.statements == []


def test_refused_snapshots_answer_409_and_change_nothing(
    api: Api, db_rows: Callable[..., dict[str, list]]
) -> None:
    """An older seq, and the last seq with other content, change nothing at all, not even the
    node's last-seen time."""
    held_gpu = [pod("a", containers={"main": [held(GPU, "gpu-0")]})]
    api.ingest_podresources(podresources("node-a", held_gpu, 5))
    before = db_rows()
    other = [pod("b", containers={"main": [held(GPU, "gpu-1")]})]
    older = api.ingest_podresources(podresources("node-a", other, 4), expect=409)
    assert older["error"]["code"] == "stale_snapshot", older
    conflicting = api.ingest_podresources(podresources("node-a", other, 5), expect=409)
    assert conflicting["error"]["details"][0]["field"] == "source.seq", conflicting
    assert db_rows() == before
    assert api.ingest_podresources(podresources("node-a", held_gpu, 5))["duplicate"] is True
