"""A node silent for longer than DEVICEDECK_STALE_AFTER leaves node_stale and node_seen events
even when it reports again before any stale sweep ran, dated when the sweep would have
marked it and when it came back."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import httpx
import pytest

from app.config import Settings
from app.main import create_app

from .conftest import dev, listandwatch, live_server

LAW = "/api/v1/ingest/listandwatch"
STALE_AFTER = 1.0


@pytest.mark.parametrize("same_content", [True, False], ids=["unchanged", "changed"])
def test_an_outage_no_sweep_saw_is_recorded_by_the_next_snapshot(
    settings: Settings, auth: dict[str, str], same_content: bool
) -> None:
    app = create_app(settings.model_copy(update={"stale_after": STALE_AFTER}))
    # No stale sweep runs in this app: only the next snapshot can notice the outage.
    app.state.background_starters.clear()
    with live_server(app) as url, httpx.Client(base_url=url, headers=auth, timeout=60) as http:
        assert http.post(LAW, json=listandwatch("node-a", [dev("gpu-0")], 1)).is_success
        [node] = http.get("/api/v1/nodes").json()["results"]
        last_seen = datetime.fromisoformat(node["last_seen"])
        time.sleep(STALE_AFTER * 2)
        devices = [dev("gpu-0")] if same_content else [dev("gpu-0", "Unhealthy")]
        back = http.post(LAW, json=listandwatch("node-a", devices, 2))
        assert back.status_code == 200, back.text
        [node] = http.get("/api/v1/nodes").json()["results"]
        events = http.get("/api/v1/events", params={"node": "node-a"}).json()["results"]
    by_kind = {e["kind"]: e for e in events}
    stale, seen = by_kind["node_stale"], by_kind["node_seen"]
    assert datetime.fromisoformat(stale["at"]) == last_seen + timedelta(seconds=STALE_AFTER)
    assert datetime.fromisoformat(seen["at"]) == datetime.fromisoformat(node["last_seen"])
    assert stale["before"]["last_seen"] == last_seen.isoformat()
