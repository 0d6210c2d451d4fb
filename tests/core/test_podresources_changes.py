"""Everything one PodResources snapshot can change of its node at once: devices it names before
any plugin snapshot, allocations that end, start, or learn their pod's UID, a pod recreated
under its name, and the allocatable sets. On PostgreSQL that is one statement (after one
read), which also writes the snapshot's receipt and events; on SQLite a statement at a time;
the outcome is the same."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session, sessionmaker

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
from .test_device_counts import assert_consistent, node_id


def allocatable(gpus: list[str], nics: list[str]) -> dict[str, Any]:
    return {
        "allocatable": {
            "devices": [
                {"resource_name": GPU, "device_ids": gpus},
                {"resource_name": NIC, "device_ids": nics},
            ]
        }
    }


FIRST = [
    pod("a", containers={"main": [held(GPU, "gpu-0")]}),
    pod("b", containers={"main": [held(GPU, "gpu-1")]}, uid="b-1"),
    pod("d", containers={"main": [held(GPU, "gpu-2")]}, uid="d-1"),
]
SECOND = [
    # Pod a's UID is learned; pod b was recreated under its name; pod d is gone; pod c takes
    # gpu-2, and gpu-9 and nic-0, which no plugin has listed yet.
    pod("a", containers={"main": [held(GPU, "gpu-0")]}, uid="a-1"),
    pod("b", containers={"main": [held(GPU, "gpu-1")]}, uid="b-2"),
    pod(
        "c",
        containers={"main": [held(GPU, "gpu-2", "gpu-9")], "side": [held(NIC, "nic-0")]},
        uid="c-1",
    ),
]


def snapshots(api: Api, node: str) -> dict[str, Any]:
    api.ingest_listandwatch(listandwatch(node, [dev("gpu-0"), dev("gpu-1"), dev("gpu-2")], 1))
    first = api.ingest_podresources(
        podresources(node, FIRST, 1, **allocatable(["gpu-0", "gpu-1", "gpu-2"], []))
    )
    assert (first["allocated"], first["added"]) == (3, 0)
    second: dict[str, Any] = api.ingest_podresources(
        podresources(
            node,
            SECOND,
            2,
            **allocatable(["gpu-0", "gpu-1", "gpu-2", "gpu-9"], ["nic-0", "nic-1"]),
        )
    )
    return second


def test_one_snapshot_adds_devices_ends_starts_and_learns_uids(
    api: Api, session_factory: sessionmaker[Session]
) -> None:
    result = snapshots(api, "node-a")
    assert (result["added"], result["released"], result["allocated"]) == (3, 2, 4)

    events = [e for e in api.events(node="node-a") if e["kind"] != "node_added"]
    second = [e for e in events if e["at"] == max(x["at"] for x in events)]
    # Newest first: the events of the second snapshot, in the order they were logged.
    logged = [
        (e["kind"], e["resource"], e["device_id"], e["pod"], e["container"])
        for e in reversed(second)
    ]
    assert logged == [
        ("device_added", GPU, "gpu-9", None, None),
        ("device_added", NIC, "nic-0", None, None),
        ("device_added", NIC, "nic-1", None, None),
        ("released", GPU, "gpu-1", "b", "main"),
        ("released", GPU, "gpu-2", "d", "main"),
        ("allocated", GPU, "gpu-1", "b", "main"),
        ("allocated", GPU, "gpu-2", "c", "main"),
        ("allocated", GPU, "gpu-9", "c", "main"),
        ("allocated", NIC, "nic-0", "c", "side"),
    ]
    devices = {
        (d["resource"], d["device_id"]): d
        for resource in (GPU, NIC)
        for d in api.devices(node="node-a", resource=resource)
    }
    for event in second:
        assert event["device"] == devices[(event["resource"], event["device_id"])]["id"]
    allocated = {e["device_id"]: e["after"] for e in second if e["kind"] == "allocated"}
    assert allocated == {
        "gpu-1": {"health": "Healthy"},
        "gpu-2": {"health": "Healthy"},
        "gpu-9": {"health": "Unknown"},
        "nic-0": {"health": "Unknown"},
    }
    released = {e["pod"]: e["before"] for e in second if e["kind"] == "released"}
    assert {pod: before["pod_uid"] for pod, before in released.items()} == {"b": "b-1", "d": "d-1"}
    first_started = api.device("node-a", "gpu-2")["allocation_history"][-1]["started"]
    assert released["d"]["started"][:19] == first_started[:19]

    holders = {
        device_id: (d["allocation"] or {}).get("pod_uid") for (_, device_id), d in devices.items()
    }
    assert holders == {
        "gpu-0": "a-1",
        "gpu-1": "b-2",
        "gpu-2": "c-1",
        "gpu-9": "c-1",
        "nic-0": "c-1",
        "nic-1": None,
    }
    assert api.get("/api/v1/nodes/node-a")["kubelet_allocatable"] == {
        GPU: ["gpu-0", "gpu-1", "gpu-2", "gpu-9"],
        NIC: ["nic-0", "nic-1"],
    }
    counts = assert_consistent(session_factory)
    node = node_id(session_factory, "node-a")
    assert (counts[(node, GPU)]["allocated"], counts[(node, GPU)]["unknown"]) == (4, 1)
    assert (counts[(node, NIC)]["allocated"], counts[(node, NIC)]["unknown"]) == (1, 2)

    # gpu-9 was the PodResources stream's doing: the plugin's next snapshot, with the same
    # content as its last, is applied in full and removes it.
    again = api.ingest_listandwatch(
        listandwatch("node-a", [dev("gpu-0"), dev("gpu-1"), dev("gpu-2")], 2)
    )
    assert again["removed"] == 1


def test_a_snapshot_reads_and_writes_allocations_in_one_statement_each_on_postgresql(
    quiet_api: Api, statements: StatementCounter
) -> None:
    """However much a snapshot changes, the device-plugin side of it is one read and one
    write on PostgreSQL's session path, and that write is also the receipt's and the events'.
    The node holds a DRA claim, which that path reads (without one, the snapshot goes on the
    driver's connection: test_podresources_driver)."""
    api = quiet_api
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1"), dev("gpu-2")], 1))
    claims = holding_a_claim("claims", "node-a")
    api.ingest_podresources(podresources("node-a", [*FIRST, claims], 1))
    with statements:
        result = api.ingest_podresources(
            podresources("node-a", [*SECOND, claims], 2, **allocatable(["gpu-0"], ["nic-1"]))
        )
    assert (result["added"], result["released"], result["allocated"]) == (3, 2, 4)
    touching = [
        s
        for s in statements.statements
        if any(table in s for table in ("allocations", "node_resources", "INTO devices"))
    ]
    if statements.engine.dialect.name == "postgresql":
        # The node's lock comes first; the stream's receipt is read with the holdings; then
        # the claims, which have not changed.
        assert statements.count == 4, statements.statements
        assert touching == statements.statements[-3:], statements.statements
        assert "ingest_receipts" in touching[0], touching[0]
        assert "FROM claim_allocations" in touching[1], touching[1]
        closing = touching[-1]
        for write in (
            "INSERT INTO devices",
            "UPDATE allocations",
            "INSERT INTO allocations",
            "INTO node_resources",
            "UPDATE ingest_receipts",
            "INSERT INTO events",
        ):
            assert write in closing, closing
    else:
        # SQLite reads devices, allocations and claims apart and writes each kind of change
        # apart.
        assert len(touching) == 9, touching
