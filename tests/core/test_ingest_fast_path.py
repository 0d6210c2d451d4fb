"""PostgreSQL ingest in the event loop: the unchanged-snapshot fast path and the full path, each
on an async engine of its own, with the worker-thread path behind them."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from devicedeck.config import Settings
from devicedeck.db import libpq_url
from devicedeck.inventory.write.ingest import EVENT_LOOP_MAX_BODY
from devicedeck.main import create_app

from .conftest import GPU, Api, MakeApi, dev, listandwatch, wait_until
from .test_ingest_validation import LAW, assert_refused

pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


def admin_connection(database_url: str, autocommit: bool = True) -> psycopg.Connection:
    return psycopg.connect(libpq_url(database_url), autocommit=autocommit)


def other_sessions(database_url: str, select: str, where: str) -> int:
    """`select` over the database's other sessions (pg_stat_activity) that match `where`: how
    many rows."""
    with admin_connection(database_url) as admin:
        rows = admin.execute(
            f"SELECT {select} FROM pg_stat_activity "
            f"WHERE datname = current_database() AND pid <> pg_backend_pid() AND {where}"
        ).fetchall()
    return len(rows)


def drop_every_other_connection(database_url: str) -> int:
    """What a database restart or an idle timeout does to the service's pooled connections."""
    return other_sessions(database_url, "pg_terminate_backend(pid)", "true")


def test_unchanged_snapshots_survive_dropped_connections(quiet_api: Api, database_url: str) -> None:
    api = quiet_api
    devices = [dev("gpu-0"), dev("gpu-1")]
    api.ingest_listandwatch(listandwatch("node-a", devices, 1))
    assert api.ingest_listandwatch(listandwatch("node-a", devices, 2))["changed"] is False
    assert drop_every_other_connection(database_url) >= 1

    assert api.ingest_listandwatch(listandwatch("node-a", devices, 3))["changed"] is False
    assert api.ingest_listandwatch(listandwatch("node-a", devices, 4))["changed"] is False
    # seq 4 was recorded: sending it again is a repeat, an older one is refused.
    assert api.ingest_listandwatch(listandwatch("node-a", devices, 4))["duplicate"] is True
    api.ingest_listandwatch(listandwatch("node-a", devices, 3), expect=409)


def test_a_refused_snapshot_does_not_touch_the_node(api: Api) -> None:
    """The fast path runs outside the full path's transaction: when it does not apply, it must
    have changed nothing, not even the node's last-seen time."""
    devices = [dev("gpu-0")]
    api.ingest_listandwatch(listandwatch("node-a", devices, 5))
    seen = api.get("/api/v1/nodes/node-a")["last_seen"]
    api.ingest_listandwatch(listandwatch("node-a", devices, 4), expect=409)
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-9")], 5), expect=409)
    assert api.get("/api/v1/nodes/node-a")["last_seen"] == seen


def test_changed_snapshots_survive_dropped_connections(quiet_api: Api, database_url: str) -> None:
    api = quiet_api
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 1))
    assert drop_every_other_connection(database_url) >= 1

    grown = api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 2))
    assert (grown["changed"], grown["added"]) == (True, 1)
    shrunk = api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-1")], 3))
    assert (shrunk["changed"], shrunk["removed"]) == (True, 1)
    removed = api.devices(state="removed")
    assert [d["device_id"] for d in removed] == ["gpu-0"]


def test_a_snapshot_too_large_for_the_event_loop_is_applied_in_full(api: Api) -> None:
    devices = [dev(f"gpu-{i:04d}", numa=[i % 2]) for i in range(700)]
    body = listandwatch("node-a", devices, 1)
    assert len(json.dumps(body)) > EVENT_LOOP_MAX_BODY

    assert api.ingest_listandwatch(body)["added"] == 700
    devices[5] = dev("gpu-0005", "Unhealthy", numa=[1])
    again = api.ingest_listandwatch(listandwatch("node-a", devices, 2))
    assert (again["changed"], again["health_changes"], again["added"]) == (True, 1, 0)
    node = api.get("/api/v1/nodes/node-a")
    assert node["resources"][GPU]["unhealthy"] == 1


def test_more_snapshots_at_once_than_connections_is_503_and_changes_nothing(
    quiet_api: Api,
) -> None:
    """Overload: every connection of the ingest pools (the driver's, then the session's) is
    busy for longer than the pool waits. The agent gets a 503 it retries, not a 500."""
    api = quiet_api
    client = api.client
    database = client.app.state.event_loop_database
    engine, statements = database.transactional, database.statements
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 1))
    engine.pool._timeout = 0.2

    async def take_every_connection() -> list:
        return [
            await engine.connect() for _ in range(engine.pool.size() + engine.pool._max_overflow)
        ]

    async def take_every_driver_connection() -> list:
        return [await statements.getconn() for _ in range(statements.max_size)]

    taken = client.portal.call(take_every_connection)
    taken_from_driver = client.portal.call(take_every_driver_connection)
    try:
        response = api.post(
            "/api/v1/ingest/listandwatch", listandwatch("node-a", [dev("gpu-1")], 2), expect=503
        )
        assert response.headers["retry-after"] == "1"
        assert response.json()["error"]["code"] == "unavailable"
    finally:
        for connection in taken:
            client.portal.call(connection.close)
        for driver_connection in taken_from_driver:
            client.portal.call(statements.putconn, driver_connection)
    assert [d["device_id"] for d in api.devices()] == ["gpu-0"]
    assert api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-1")], 2))["added"] == 1


def test_a_database_that_refuses_the_fast_path_answers_503_and_changes_nothing(
    settings: Settings, auth: dict[str, str], database_url: str
) -> None:
    """The unchanged-snapshot statement fails without losing its connection (here: the node
    stays locked past the database's lock_timeout). The full path meets the same refusal, and
    the agent gets the 503 it retries, not a 500."""
    database = make_url(database_url).database
    with admin_connection(database_url) as admin:
        admin.execute(f"ALTER DATABASE \"{database}\" SET lock_timeout = '200ms'")
    try:
        app = create_app(settings)
        app.state.background_starters.clear()
        with TestClient(app) as client:
            api = Api(client, auth)
            devices = [dev("gpu-0")]
            api.ingest_listandwatch(listandwatch("node-a", devices, 1))
            api.ingest_listandwatch(listandwatch("node-a", devices, 2))
            seen = api.get("/api/v1/nodes/node-a")["last_seen"]
            with admin_connection(database_url, autocommit=False) as holder:
                holder.execute("SELECT 1 FROM nodes WHERE name = 'node-a' FOR UPDATE")
                response = api.post(
                    "/api/v1/ingest/listandwatch", listandwatch("node-a", devices, 3), expect=503
                )
                assert response.headers["retry-after"] == "1"
                holder.rollback()
            assert api.get("/api/v1/nodes/node-a")["last_seen"] == seen
            again = api.ingest_listandwatch(listandwatch("node-a", devices, 3))
            assert (again["changed"], again["duplicate"]) == (False, False)
    finally:
        with admin_connection(database_url) as admin:
            admin.execute(f'ALTER DATABASE "{database}" RESET lock_timeout')


def waiting_for_locks(database_url: str) -> int:
    """The database's sessions waiting for a lock another transaction holds."""
    return other_sessions(database_url, "pid", "wait_event_type = 'Lock'")


def test_a_new_nodes_first_snapshots_at_once_add_the_node_once(
    quiet_api: Api, database_url: str
) -> None:
    """Two streams of a new node at once. The first inserts the node's row; the second's insert
    of the same row waits for the first's transaction, then finds the row there, and the full
    path applies it under the node's lock: both are applied, and the node is added once."""
    api = quiet_api
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 1))  # checks the token
    gpus = listandwatch("node-b", [dev("gpu-0"), dev("gpu-1")], 1)
    nics = listandwatch("node-b", [dev("nic-0")], 1, resource="example.com/nic")
    with (
        admin_connection(database_url, autocommit=False) as holder,
        ThreadPoolExecutor(2) as requests,
    ):
        # Keeps the first snapshot's transaction open after its node's insert, at the receipt
        # its closing statement writes.
        holder.execute("LOCK TABLE ingest_receipts IN SHARE MODE")
        first = requests.submit(api.ingest_listandwatch, gpus)
        wait_until(lambda: waiting_for_locks(database_url) == 1, what="the first snapshot")
        second = requests.submit(api.ingest_listandwatch, nics)
        wait_until(lambda: waiting_for_locks(database_url) == 2, what="the second snapshot")
        holder.rollback()
        results = first.result(timeout=60), second.result(timeout=60)
    assert [(r["added"], r["events"]) for r in results] == [(2, 3), (1, 1)]
    kinds = [e["kind"] for e in api.events(node="node-b")]
    assert sorted(kinds) == ["device_added", "device_added", "device_added", "node_added"]
    assert {d["device_id"] for d in api.devices(node="node-b", resource="example.com/nic")} == {
        "nic-0"
    }


def test_the_per_node_device_limit_refuses_on_either_path_and_changes_nothing(
    make_api: MakeApi, db_rows: Callable[..., dict]
) -> None:
    """The limit on the driver's connection (a new node, a new stream, new devices on a known
    stream) and on the full path (with a plugin's registration): 422 naming the field, and
    nothing written, not even the new node's row."""
    small = make_api(max_devices_per_node=3)
    plugin = {"endpoint": "gpu.sock", "version": "v1beta1"}
    four = [dev(f"gpu-{i}") for i in range(4)]
    before = db_rows()
    for new_node in (
        listandwatch("node-b", four, 1),
        listandwatch("node-b", four, 1, plugin=plugin),
    ):
        assert_refused(small.post(LAW, new_node, expect=None), "devices", "max_devices_per_node")
        assert db_rows() == before
    small.ingest_listandwatch(listandwatch("node-a", four[:2], 1))
    before = db_rows()
    nics = [dev("nic-0"), dev("nic-1")]
    over = [
        listandwatch("node-a", nics, 1, resource="example.com/nic"),
        listandwatch("node-a", four, 2),
        listandwatch("node-a", four, 2, plugin=plugin),
    ]
    for body in over:
        assert_refused(small.post(LAW, body, expect=None), "devices", "max_devices_per_node")
        assert db_rows() == before
    at_limit = listandwatch("node-a", nics[:1], 1, resource="example.com/nic")
    assert small.ingest_listandwatch(at_limit)["added"] == 1
    assert small.ingest_listandwatch(listandwatch("node-b", four[:3], 1))["added"] == 3
    kinds = [e["kind"] for e in small.events(node="node-b")]
    assert kinds.count("node_added") == 1
