"""The event stream against real servers: an ingest is announced on an open stream, streams
end when the client leaves or the server stops, and with PostgreSQL a change ingested through one
service process reaches a page served by another."""

from __future__ import annotations

import itertools
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import fastapi.routing
import httpx
import pytest

from devicedeck.config import AuthMode, Settings

from .conftest import GPU, Ingest, MakeToken, dev
from .dom import parse
from .servers import served_processes, threaded_server, wait_until

# A deadline for outcomes, not a speed target: generous, so a busy machine still passes.
EVENT_DEADLINE = 60.0


def read_event(lines: Iterator[str], deadline: float) -> dict[str, str]:
    """The next complete SSE event (comments and retry-only blocks skipped)."""
    fields: dict[str, str] = {}
    for line in lines:
        if line == "":
            if "event" in fields:
                return fields
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.strip()
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"no event before the deadline; last fields {fields}")


def open_stream(client: httpx.Client, url: str, headers: dict[str, str]) -> httpx.Response:
    request = client.build_request("GET", url, headers=headers)
    response = client.send(request, stream=True)
    assert response.status_code == 200, response.read()
    assert response.headers["content-type"].startswith("text/event-stream")
    return response


def test_stream_announces_an_ingest(settings: Settings, make_token: MakeToken) -> None:
    headers = {"Authorization": f"Bearer {make_token('read', 'ingest')}"}
    with (
        threaded_server(settings) as (url, _app),
        httpx.Client(base_url=url, timeout=EVENT_DEADLINE) as client,
    ):
        stream = open_stream(client, "/ui/stream?since=0", headers)
        try:
            lines = stream.iter_lines()
            assert next(lines) == "retry: 2000"
            Ingest(client, headers).devices("node-a", [dev("gpu-0")])
            event = read_event(lines, time.monotonic() + EVENT_DEADLINE)
        finally:
            stream.close()
        assert event["event"] == "changed" and int(event["id"]) > 0


def test_stream_catches_up_and_ends_when_the_client_leaves(
    settings: Settings, make_token: MakeToken
) -> None:
    headers = {"Authorization": f"Bearer {make_token('read', 'ingest')}"}
    with (
        threaded_server(settings) as (url, app),
        httpx.Client(base_url=url, timeout=EVENT_DEADLINE) as client,
    ):
        Ingest(client, headers).devices("node-a", [dev("gpu-0")])
        hub = app.state.live
        wait_until(lambda: hub.latest > 0, what="the hub to see the ingest")
        # A page rendered before that change (since=0) hears about it at once on connect;
        # a reconnect resumes from Last-Event-ID.
        stream = open_stream(client, "/ui/stream?since=0", headers)
        # Keep the line iterator: dropping it mid-stream closes the connection.
        lines = stream.iter_lines()
        event = read_event(lines, time.monotonic() + EVENT_DEADLINE)
        assert int(event["id"]) == hub.latest
        wait_until(lambda: hub.subscriber_count == 1, what="the stream to subscribe")
        stream.close()
        wait_until(lambda: hub.subscriber_count == 0, what="the stream to notice the client left")


def test_stream_headers_and_keepalive_while_nothing_changes(
    settings: Settings, make_token: MakeToken, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Proxies must neither cache nor buffer the stream, and an idle stream still sends
    something now and then (every 15 s in service; shortened here), so it is not cut."""
    monkeypatch.setattr(fastapi.routing, "_PING_INTERVAL", 0.3)
    headers = {"Authorization": f"Bearer {make_token('read')}"}
    with (
        threaded_server(settings) as (url, _app),
        httpx.Client(base_url=url, timeout=EVENT_DEADLINE) as client,
    ):
        stream = open_stream(client, "/ui/stream?since=0", headers)
        try:
            assert stream.headers["cache-control"] == "no-cache"
            assert stream.headers["x-accel-buffering"] == "no"
            assert "content-length" not in stream.headers
            lines = stream.iter_lines()
            assert next(lines) == "retry: 2000"
            comments = [line for line in itertools.islice(lines, 6) if line.startswith(":")]
        finally:
            stream.close()
        assert len(comments) >= 2


def test_stream_is_refused_once_the_service_is_shutting_down(
    settings: Settings, make_token: MakeToken
) -> None:
    headers = {"Authorization": f"Bearer {make_token('read')}"}
    with (
        threaded_server(settings) as (url, app),
        httpx.Client(base_url=url, timeout=EVENT_DEADLINE) as client,
    ):
        app.state.live.close_threadsafe()
        wait_until(lambda: app.state.live.closed.is_set(), what="the hub to close")
        answer = client.get("/ui/stream", headers=headers)
        assert answer.status_code == 503
        assert answer.headers["retry-after"] == "2"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_server_shutdown_ends_open_streams_promptly(database_url: str, tmp_path: Path) -> None:
    env = {"DEVICEDECK_DATABASE_URL": database_url, "DEVICEDECK_AUTH": "off"}
    with (
        served_processes([env], tmp_path) as [served],
        httpx.Client(timeout=EVENT_DEADLINE) as client,
    ):
        stream = open_stream(client, served.url + "/ui/stream", {})
        try:
            lines = stream.iter_lines()
            assert next(lines) == "retry: 2000"
            served.process.send_signal(signal.SIGTERM)
            assert [line for line in lines if line] == []  # ends, not hangs the shutdown
            served.process.wait(timeout=60)
            # uvicorn re-raises the signal after a graceful shutdown, hence -SIGTERM.
            assert served.process.returncode in (0, -signal.SIGTERM)
            assert "Application shutdown complete" in served.log_path.read_text()
        finally:
            stream.close()


@pytest.mark.slow
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_change_through_one_process_shows_live_on_another(
    database_url: str, make_token: MakeToken, tmp_path: Path
) -> None:
    token = make_token("read", "ingest")
    headers = {"Authorization": f"Bearer {token}"}
    env = {"DEVICEDECK_DATABASE_URL": database_url, "DEVICEDECK_AUTH": AuthMode.TOKEN.value}
    with (
        served_processes([env, env], tmp_path) as [first, second],
        httpx.Client(timeout=EVENT_DEADLINE) as client,
    ):
        stream = open_stream(client, second.url + "/ui/stream?since=0", headers)
        try:
            lines = stream.iter_lines()
            assert next(lines) == "retry: 2000"
            writer = httpx.Client(base_url=first.url, timeout=EVENT_DEADLINE)
            with writer:
                Ingest(writer, headers).devices("node-far", [dev("<gpu-far>")])
                event = read_event(lines, time.monotonic() + EVENT_DEADLINE)
        finally:
            stream.close()
        assert event["event"] == "changed"
        # And the page the second process serves shows it.
        page = parse(client.get(second.url + f"/devices?resource={GPU}", headers=headers).text)
        rows = page.by_id("device-results").one("tbody").find_all("tr")
        assert [r.one("th").clean_text for r in rows] == ["<gpu-far>"]
