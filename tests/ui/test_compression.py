"""gzip for pages and JSON, never for the event stream or ingest; and a tab hears at most one
"changed" per pause, carrying the newest event id, however many changes came meanwhile."""

from __future__ import annotations

import gzip
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from devicedeck.config import Settings
from devicedeck.ui import stream as stream_module

from .conftest import Ingest, MakeToken, Pages, dev, typical_cluster
from .servers import threaded_server, wait_until
from .test_live import EVENT_DEADLINE, open_stream, read_event

GZIP = {"Accept-Encoding": "gzip"}


def raw(client: TestClient, path: str, headers: dict[str, str]) -> httpx.Response:
    """The response as sent: the test client would otherwise decode it."""
    response = client.get(path, headers={**headers, **GZIP})
    assert response.status_code == 200, response.text
    return response


def test_pages_and_json_are_gzipped_when_asked(pages: Pages, ingest: Ingest) -> None:
    typical_cluster(ingest)
    for path in ("/", "/events", "/devices", "/api/v1/devices", "/api/v1/events"):
        response = raw(pages.client, path, pages.headers)
        assert response.headers["content-encoding"] == "gzip", path
        assert "Accept-Encoding" in response.headers["vary"], path
        # httpx decoded it; the bytes on the wire were smaller.
        assert len(gzip.compress(response.content)) < len(response.content), path
    plain = pages.client.get("/events", headers={**pages.headers, "Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers
    answer = pages.client.post(
        "/api/v1/ingest/listandwatch",
        json={
            "node": "node-z",
            "resource": "example.com/gpu",
            "source": {"boot_id": "b", "seq": 1},
            "observed_at": "2026-12-02T12:00:00Z",
            "plugin": {"endpoint": "plugin.sock", "version": "v1beta1"},
            "devices": [dev(f"gpu-{i}") for i in range(200)],
        },
        headers={**pages.headers, **GZIP},
    )
    assert answer.status_code == 200 and "content-encoding" not in answer.headers


def test_stream_is_not_gzipped_and_coalesces_changes(
    settings: Settings, make_token: MakeToken, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A long pause, so the changes below surely land inside it on a busy machine.
    monkeypatch.setattr(stream_module, "PACE_SECONDS", 20.0)
    headers = {"Authorization": f"Bearer {make_token('read', 'ingest')}", **GZIP}
    with (
        threaded_server(settings) as (url, app),
        httpx.Client(base_url=url, timeout=EVENT_DEADLINE) as client,
    ):
        stream = open_stream(client, "/ui/stream?since=0", headers)
        try:
            assert "content-encoding" not in stream.headers
            lines = stream.iter_lines()
            ingest = Ingest(client, headers)
            ingest.devices("node-a", [dev("gpu-0")])
            first = read_event(lines, time.monotonic() + EVENT_DEADLINE)
            for health in ("Unhealthy", "Healthy", "Unhealthy"):
                ingest.devices("node-a", [dev("gpu-0", health)])
            hub = app.state.live
            wait_until(lambda: hub.latest > int(first["id"]) + 2, 30, "the hub to see them")
            newest = hub.latest
            second = read_event(lines, time.monotonic() + EVENT_DEADLINE)
        finally:
            stream.close()
        assert int(second["id"]) == newest  # one message for the three changes
