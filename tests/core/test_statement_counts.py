"""The number of SQL statements a list endpoint sends does not grow with the items it lists."""

from __future__ import annotations

from devicedeck.inventory.write.unchanged import _ADVANCE_UNCHANGED_ROWS_SQL

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


def grow(api: Api, nodes: range) -> None:
    """Per node: 3 GPUs and a NIC, two pods holding devices (one with a DRA claim too)."""
    for n in nodes:
        node = f"node-{n:02d}"
        api.ingest_listandwatch(
            listandwatch(node, [dev("gpu-0"), dev("gpu-1", "Unhealthy"), dev("gpu-2")], 1)
        )
        api.ingest_listandwatch(
            listandwatch(node, [dev("nic-0")], 1, resource=f"example.com/nic{n}")
        )
        claim = {
            "claim_name": "claim",
            "claim_namespace": "ml",
            "claim_resources": [
                {"driver_name": "gpu.example.com", "pool_name": node, "device_name": "dra-0"}
            ],
        }
        pods = [
            pod(
                f"a-{n:02d}",
                containers={"main": [held(GPU, "gpu-0")], "side": [held(GPU, "gpu-1")]},
            ),
            {
                **pod(f"b-{n:02d}", namespace="serving"),
                "containers": [
                    {"name": "main", "devices": [held(GPU, "gpu-2")], "dynamic_resources": [claim]}
                ],
            },
        ]
        api.ingest_podresources(podresources(node, pods, 1))
        api.ingest_listandwatch(
            listandwatch(node, [dev("gpu-0"), dev("gpu-1"), dev("gpu-2", "Bad")], 2)
        )


LIST_ENDPOINTS = [
    ("/api/v1/devices", {}),
    ("/api/v1/devices", {"sort": "-health", "allocated": "true"}),
    ("/api/v1/devices", {"namespace": "ml", "state": "any"}),
    ("/api/v1/nodes", {}),
    ("/api/v1/nodes", {"sort": "-last_seen", "resource": GPU}),
    ("/api/v1/pods", {}),
    ("/api/v1/resources", {}),
    ("/api/v1/events", {}),
    ("/api/v1/events", {"kind": "allocated"}),
]


def count_statements(api: Api, statements: StatementCounter, path: str, params: dict) -> int:
    api.get(path, limit=1000, **params)  # warm up: token last-used time, caches
    with statements:
        page = api.get(path, limit=1000, **params)
    assert page["results"], path
    return statements.count


def test_list_statement_counts_do_not_grow_with_items(
    quiet_api: Api, statements: StatementCounter
) -> None:
    api = quiet_api
    # One database grown once, measured at both sizes: growing it per endpoint costs too much.
    grow(api, range(3))
    few = {
        (path, str(params)): count_statements(api, statements, path, params)
        for path, params in LIST_ENDPOINTS
    }
    grow(api, range(3, 30))
    many = {
        (path, str(params)): count_statements(api, statements, path, params)
        for path, params in LIST_ENDPOINTS
    }
    assert many == few
    assert max(few.values()) <= 8, few


def test_detail_statement_counts_do_not_grow_with_history(
    quiet_api: Api, statements: StatementCounter
) -> None:
    api = quiet_api
    grow(api, range(1))

    def counts() -> dict[str, int]:
        [device] = [
            d for d in api.devices(node="node-00", resource=GPU) if d["device_id"] == "gpu-0"
        ]
        found: dict[str, int] = {}
        for path in (
            f"/api/v1/devices/{device['id']}",
            "/api/v1/nodes/node-00",
            "/api/v1/pods/ml/a-00",
        ):
            api.get(path)
            with statements:
                api.get(path)
            found[path] = statements.count
        return found

    before = counts()
    for seq in range(2, 12):
        health = "Healthy" if seq % 2 else "Unhealthy"
        api.ingest_listandwatch(
            listandwatch("node-00", [dev("gpu-0", health), dev("gpu-1"), dev("gpu-2")], seq + 1)
        )
        api.ingest_listandwatch(listandwatch("node-00", [dev(f"nic-{seq}")], seq, resource=NIC))
    assert counts() == before


def test_unchanged_snapshot_costs_one_statement_on_postgresql_two_on_sqlite(
    quiet_api: Api, statements: StatementCounter
) -> None:
    """The common case of a node agent's life: same content, next seq. Only the node's last
    seen time and the stream's receipt are written. On PostgreSQL that is one statement, run on
    the driver's connection (`_ADVANCE_UNCHANGED_ROWS_SQL`), so SQLAlchemy sees none."""
    api = quiet_api
    devices = [dev("gpu-0"), dev("gpu-1")]
    api.ingest_listandwatch(listandwatch("node-a", devices, 1))
    api.ingest_listandwatch(listandwatch("node-a", devices, 2))
    pods = [pod("p", containers={"c": [held(GPU, "gpu-0")]})]
    api.ingest_podresources(podresources("node-a", pods, 1))
    api.ingest_podresources(podresources("node-a", pods, 2))
    on_postgresql = statements.engine.dialect.name == "postgresql"
    assert "UPDATE nodes" in _ADVANCE_UNCHANGED_ROWS_SQL
    assert "UPDATE ingest_receipts" in _ADVANCE_UNCHANGED_ROWS_SQL
    for seq in (3, 4):
        for post, body in (
            (api.ingest_listandwatch, listandwatch("node-a", devices, seq)),
            (api.ingest_podresources, podresources("node-a", pods, seq)),
        ):
            seen = api.get("/api/v1/nodes/node-a")["last_seen"]
            with statements:
                assert post(body)["changed"] is False
            if on_postgresql:
                assert statements.statements == []
            else:
                sent = [s.split()[0].upper() for s in statements.statements]
                # The token was checked on the first request and is cached now: no SELECT.
                assert sent == ["BEGIN", "UPDATE", "UPDATE"], sent
            # Both writes happened: the node was seen, and the seq is now the stream's last.
            assert api.get("/api/v1/nodes/node-a")["last_seen"] > seen
            assert post(body)["duplicate"] is True


def test_a_changed_snapshot_sends_no_statement_per_pod(
    quiet_api: Api, statements: StatementCounter
) -> None:
    """Allocations ended and started, and their events, go in a fixed number of statements
    however many pods a snapshot moves. The node holds a DRA claim, so that PostgreSQL too
    takes the session path, whose statements are counted here (without one, the driver's two
    round trips, below)."""
    api = quiet_api
    api.ingest_listandwatch(listandwatch("node-a", [dev(f"gpu-{i}") for i in range(12)], 1))

    def pods_on_gpus(count: int, generation: int) -> list[dict]:
        return [holding_a_claim("claims", "node-a")] + [
            pod(f"job-{generation}-{i}", containers={"main": [held(GPU, f"gpu-{i}")]})
            for i in range(count)
        ]

    sent: dict[int, int] = {}
    seq = 0
    for count in (2, 12):
        seq += 1
        api.ingest_podresources(podresources("node-a", pods_on_gpus(count, seq), seq))
        seq += 1
        with statements:
            result = api.ingest_podresources(podresources("node-a", pods_on_gpus(count, seq), seq))
        assert (result["released"], result["allocated"]) == (count, count)
        sent[count] = statements.count
    assert sent[12] == sent[2] > 0, statements.statements


def test_a_changed_podresources_snapshot_goes_on_the_drivers_connection_on_postgresql(
    quiet_api: Api, statements: StatementCounter
) -> None:
    """A changed PodResources snapshot without DRA claims, on PostgreSQL: the node's lock and
    the read of its receipt and holdings, then one statement with the allocation changes, the
    devices it creates, the receipt and the events, on a pooled connection of the driver
    (`apply_pod_resources`), so SQLAlchemy sees none. SQLite writes them one by one. Either
    way all of them happen."""
    api = quiet_api
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1))
    api.ingest_podresources(
        podresources("node-a", [pod("a", containers={"m": [held(GPU, "gpu-0")]})], 1)
    )
    moved = [pod("b", containers={"m": [held(GPU, "gpu-1", "gpu-2")]})]
    with statements:
        result = api.ingest_podresources(podresources("node-a", moved, 2))
    assert (result["added"], result["released"], result["allocated"]) == (1, 1, 2)
    if statements.engine.dialect.name == "postgresql":
        assert statements.statements == []
    else:
        sent = [s.split()[0].upper() for s in statements.statements]
        assert sent.count("INSERT") >= 3, sent
    kinds = [
        e["kind"]
        for e in sorted(api.get("/api/v1/events", node="node-a")["results"], key=lambda e: e["id"])
    ]
    assert kinds[-4:] == ["device_added", "released", "allocated", "allocated"], kinds
    # The receipt moved to seq 2: the same snapshot again is a repeat.
    assert api.ingest_podresources(podresources("node-a", moved, 2))["duplicate"] is True


def test_a_health_flip_goes_on_the_drivers_connection_on_postgresql(
    quiet_api: Api, statements: StatementCounter
) -> None:
    """A health flip on a stream this process has stored, on PostgreSQL: the node's lock, the
    stream's read, then the device's change, the receipt and the event, all on a pooled
    connection of the driver (`apply_listed_devices`), so SQLAlchemy sees none. SQLite writes
    them one by one. Either way all of them happen."""
    api = quiet_api
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1))
    flipped = listandwatch("node-a", [dev("gpu-0", "Unhealthy"), dev("gpu-1")], 2)
    with statements:
        assert api.ingest_listandwatch(flipped)["health_changes"] == 1
    if statements.engine.dialect.name == "postgresql":
        assert statements.statements == []
    else:
        sent = [s.split()[0].upper() for s in statements.statements]
        assert sent.count("UPDATE") >= 2 and sent.count("INSERT") == 1, sent
    devices = api.get("/api/v1/devices", node="node-a")["results"]
    assert {d["device_id"]: d["health"] for d in devices} == {
        "gpu-0": "Unhealthy",
        "gpu-1": "Healthy",
    }
    events = api.get("/api/v1/events", kind="health_changed")["results"]
    assert [(e["device_id"], e["after"]["health"]) for e in events] == [("gpu-0", "Unhealthy")]
    # The receipt moved to seq 2: the same snapshot again is a repeat.
    assert api.ingest_listandwatch(flipped)["duplicate"] is True


def test_a_new_device_on_a_known_stream_goes_on_the_drivers_connection_on_postgresql(
    quiet_api: Api, statements: StatementCounter
) -> None:
    """A changed snapshot that lists a new device, on PostgreSQL: the node's lock and the
    stream's read, then the new device's row, the other device's change, the receipt and the
    events in one statement, on the driver's connection. The device_added event names the
    device the same statement inserted."""
    api = quiet_api
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1))
    grown = listandwatch("node-a", [dev("gpu-0", "Unhealthy"), dev("gpu-1"), dev("gpu-2")], 2)
    with statements:
        result = api.ingest_listandwatch(grown)
    assert (result["added"], result["health_changes"], result["events"]) == (1, 1, 2)
    if statements.engine.dialect.name == "postgresql":
        assert statements.statements == []
    added = api.get("/api/v1/events", kind="device_added", node="node-a")["results"]
    assert sorted(e["device_id"] for e in added) == ["gpu-0", "gpu-1", "gpu-2"]
    devices = api.get("/api/v1/devices", node="node-a")["results"]
    assert {d["device_id"]: d["health"] for d in devices} == {
        "gpu-0": "Unhealthy",
        "gpu-1": "Healthy",
        "gpu-2": "Healthy",
    }
    new = next(d for d in devices if d["device_id"] == "gpu-2")
    its_events = api.get("/api/v1/events", device=new["id"])["results"]
    assert [(e["kind"], e["device_id"]) for e in its_events] == [("device_added", "gpu-2")]
    assert api.ingest_listandwatch(grown)["duplicate"] is True


def test_a_new_nodes_device_list_goes_on_the_drivers_connection_on_postgresql(
    quiet_api: Api, statements: StatementCounter
) -> None:
    """A new node's first snapshot on PostgreSQL: the node's row, inserted where there is no
    row to lock, and the stream's read; then its devices, its receipt and its events, all on
    the driver's connection."""
    api = quiet_api
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 1))  # checks the token
    body = listandwatch("node-b", [dev("gpu-0"), dev("gpu-1", "Unhealthy")], 1)
    with statements:
        assert api.ingest_listandwatch(body)["added"] == 2
    if statements.engine.dialect.name == "postgresql":
        assert statements.statements == []
    events = api.get("/api/v1/events", node="node-b")["results"]
    # Newest first.
    assert [(e["kind"], e["device_id"]) for e in reversed(events)] == [
        ("node_added", None),
        ("device_added", "gpu-0"),
        ("device_added", "gpu-1"),
    ]
    devices = {d["device_id"]: d for d in api.get("/api/v1/devices", node="node-b")["results"]}
    assert (devices["gpu-0"]["health"], devices["gpu-1"]["health"]) == ("Healthy", "Unhealthy")
    for event in events[:2]:
        assert event["device"] == devices[event["device_id"]]["id"]
    assert api.ingest_listandwatch(body)["duplicate"] is True


def test_a_new_node_the_drivers_connection_does_not_take_closes_in_one_statement(
    quiet_api: Api, statements: StatementCounter
) -> None:
    """A new node's first snapshot with its plugin's registration takes the full path on
    PostgreSQL: the node's row, inserted where there is no row to lock, in the locking
    statement; its devices; its registration; then its receipt with its events."""
    api = quiet_api
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 1))  # checks the token
    plugin = {"endpoint": "gpu.sock", "version": "v1beta1"}
    body = listandwatch("node-b", [dev("gpu-0"), dev("gpu-1", "Unhealthy")], 1, plugin=plugin)
    with statements:
        assert api.ingest_listandwatch(body)["added"] == 2
    if statements.engine.dialect.name == "postgresql":
        assert statements.count == 4, statements.statements
        locking, closing = statements.statements[0], statements.statements[-1]
        assert "FOR UPDATE" in locking and "INSERT INTO nodes" in locking
        assert "INSERT INTO devices" in statements.statements[1]
        assert "INSERT INTO ingest_receipts" in closing and "INSERT INTO events" in closing
    kinds = sorted(e["kind"] for e in api.get("/api/v1/events", node="node-b")["results"])
    assert kinds == ["device_added", "device_added", "node_added", "plugin_registered"]
    assert api.ingest_listandwatch(body)["duplicate"] is True
