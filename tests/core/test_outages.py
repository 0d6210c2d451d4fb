"""A node silent for longer than DEVICEDECK_STALE_AFTER leaves node_stale and node_seen events
even when it reports again before any stale sweep ran, dated when the sweep would have
marked it and when it came back."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from devicedeck.config import Settings
from devicedeck.db import create_db_engine
from devicedeck.main import create_app

from .conftest import (
    GPU,
    Api,
    Json,
    dev,
    held,
    listandwatch,
    live_server,
    pod,
    podresources,
)

LAW = "/api/v1/ingest/listandwatch"
PODRES = "/api/v1/ingest/podresources"
STALE_AFTER = 1.0


def first_and_back(stream: str, same_content: bool) -> tuple[str, Json, Json]:
    """Where a stream's snapshots go, its first snapshot, and the one after the outage."""
    if stream == "listandwatch":
        devices = [dev("gpu-0")] if same_content else [dev("gpu-0", "Unhealthy")]
        return LAW, listandwatch("node-a", [dev("gpu-0")], 1), listandwatch("node-a", devices, 2)
    holding = [pod("a", containers={"main": [held(GPU, "gpu-0")]})]
    back = holding if same_content else [pod("b", containers={"main": [held(GPU, "gpu-0")]})]
    return PODRES, podresources("node-a", holding, 1), podresources("node-a", back, 2)


@pytest.mark.parametrize("stream", ["listandwatch", "podresources"])
@pytest.mark.parametrize("same_content", [True, False], ids=["unchanged", "changed"])
def test_an_outage_no_sweep_saw_is_recorded_by_the_next_snapshot(
    settings: Settings, auth: dict[str, str], same_content: bool, stream: str
) -> None:
    app = create_app(settings.model_copy(update={"stale_after": STALE_AFTER}))
    # No stale sweep runs in this app: only the next snapshot can notice the outage.
    app.state.background_starters.clear()
    path, first, after_the_outage = first_and_back(stream, same_content)
    with live_server(app) as url, httpx.Client(base_url=url, headers=auth, timeout=60) as http:
        assert http.post(path, json=first).is_success
        [node] = http.get("/api/v1/nodes").json()["results"]
        last_seen = datetime.fromisoformat(node["last_seen"])
        time.sleep(STALE_AFTER * 2)
        back = http.post(path, json=after_the_outage)
        assert back.status_code == 200, back.text
        [node] = http.get("/api/v1/nodes").json()["results"]
        events = http.get("/api/v1/events", params={"node": "node-a"}).json()["results"]
    by_kind = {e["kind"]: e for e in events}
    stale, seen = by_kind["node_stale"], by_kind["node_seen"]
    assert datetime.fromisoformat(stale["at"]) == last_seen + timedelta(seconds=STALE_AFTER)
    assert datetime.fromisoformat(seen["at"]) == datetime.fromisoformat(node["last_seen"])
    assert stale["before"]["last_seen"] == last_seen.isoformat()


def test_an_outage_is_recorded_in_utc_whatever_the_databases_time_zone(
    settings: Settings, auth: dict[str, str]
) -> None:
    """Times read back for a changed snapshot are UTC, as everywhere else, even when the
    PostgreSQL connection's zone is another one."""
    url = make_url(settings.database_url)
    postgresql = url.get_backend_name() == "postgresql"
    zone = "ALTER DATABASE {} SET timezone = 'Asia/Kolkata'"
    if postgresql:
        admin = create_db_engine(settings.database_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.exec_driver_sql(zone.format(f'"{url.database}"'))
    try:
        app = create_app(settings.model_copy(update={"stale_after": STALE_AFTER}))
        app.state.background_starters.clear()
        with TestClient(app) as client:
            api = Api(client, auth)
            api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 1))
            last_seen = api.get("/api/v1/nodes/node-a")["last_seen"]
            time.sleep(STALE_AFTER * 2)
            api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0", "Unhealthy")], 2))
            events = api.get("/api/v1/events", node="node-a")["results"]
    finally:
        if postgresql:
            with admin.connect() as connection:
                connection.exec_driver_sql(f'ALTER DATABASE "{url.database}" RESET timezone')
            admin.dispose()
    [stale] = [e for e in events if e["kind"] == "node_stale"]
    assert stale["before"]["last_seen"] == last_seen
    assert datetime.fromisoformat(last_seen).utcoffset() == timedelta(0)
