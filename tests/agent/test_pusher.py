"""Pushing: answers mapped to outcomes, retries, latest-state-only, re-sync and re-sends.
The pusher runs its real thread against a scripted poster; the client against httpx's mock
transport; the token source against real files."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from devicedeck.agent.client import IngestClient, Outcome, PushResult
from devicedeck.agent.identity import SourceIdentity
from devicedeck.agent.metrics import AgentMetrics
from devicedeck.agent.pusher import Pusher
from devicedeck.agent.snapshots import Snapshot, listandwatch_snapshot
from devicedeck.agent.token import TokenSource
from devicedeck.retry import Backoff

from .helpers import wait_until

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def snapshot(resource: str, health: str = "Healthy") -> Snapshot:
    devices = [{"ID": "d0", "health": health}]
    return listandwatch_snapshot(
        "node-a", resource, devices, health_source="derived", observed_at=NOW
    )


class ScriptedPoster:
    """Answers with `answer(payload)`, ACCEPTED by default; records every post."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self.answer: Callable[[dict[str, Any]], PushResult] = lambda p: PushResult(
            Outcome.ACCEPTED, 200, changed=True
        )
        self._lock = threading.Lock()

    def post(self, path: str, payload: dict[str, Any]) -> PushResult:
        with self._lock:
            self.posts.append(payload)
        return self.answer(payload)

    def sent(self) -> list[tuple[str, str]]:
        with self._lock:
            return [(p["resource"], p["devices"][0]["health"]) for p in self.posts]


@pytest.fixture
def make_pusher() -> Iterator[Callable[..., tuple[Pusher, ScriptedPoster, SourceIdentity]]]:
    started: list[Pusher] = []

    def make(**options: Any) -> tuple[Pusher, ScriptedPoster, SourceIdentity]:
        poster = ScriptedPoster()
        identity = SourceIdentity("kernel", 0.0)
        settings: dict[str, Any] = {
            "heartbeat": 3600.0,
            "backoff": Backoff(0.01, 0.05, random.Random(1)),
            "auth_retry": 3600.0,
        }
        settings.update(options)
        pusher = Pusher(poster, identity, AgentMetrics(), **settings)
        pusher.start()
        started.append(pusher)
        return pusher, poster, identity

    yield make
    for pusher in started:
        pusher.stop()


def test_an_outage_ends_with_one_post_of_the_latest_state_per_stream(
    make_pusher: Callable[..., tuple[Pusher, ScriptedPoster, SourceIdentity]],
) -> None:
    pusher, poster, _ = make_pusher()
    down = threading.Event()
    down.set()
    poster.answer = lambda p: (
        PushResult(Outcome.RETRY, 503)
        if down.is_set()
        else PushResult(Outcome.ACCEPTED, 200, changed=True)
    )
    for health in ("Healthy", "Unhealthy", "Healthy", "Unhealthy"):
        pusher.offer(snapshot("example.com/a", health))
    pusher.offer(snapshot("example.com/b"))
    wait_until(lambda: len(poster.posts) >= 3, message="retries during the outage")
    outage_posts = len(poster.posts)
    down.clear()
    wait_until(lambda: not pusher.pending(), message="caught up")
    after = poster.sent()[outage_posts:]
    # Each stream once, with its latest content (one may have been in flight at recovery).
    assert sorted(set(after)) == [("example.com/a", "Unhealthy"), ("example.com/b", "Healthy")]
    assert len(after) <= 3
    seqs = [p["source"]["seq"] for p in poster.posts]
    assert seqs == sorted(set(seqs)), "every attempt takes a new, higher seq"


def test_unchanged_content_waits_for_the_heartbeat(
    make_pusher: Callable[..., tuple[Pusher, ScriptedPoster, SourceIdentity]],
) -> None:
    pusher, poster, _ = make_pusher(heartbeat=1.5)
    pusher.offer(snapshot("example.com/a"))
    wait_until(lambda: len(poster.posts) == 1)
    pusher.offer(snapshot("example.com/a"))  # same content
    pusher.offer(snapshot("example.com/b"))
    wait_until(lambda: len(poster.posts) == 2)
    assert poster.sent()[1] == ("example.com/b", "Healthy")
    wait_until(lambda: len(poster.posts) >= 4, message="heartbeat re-sends")
    assert set(poster.sent()[2:4]) == {("example.com/a", "Healthy"), ("example.com/b", "Healthy")}


def test_a_conflict_starts_a_new_sequence_and_resends_every_stream(
    make_pusher: Callable[..., tuple[Pusher, ScriptedPoster, SourceIdentity]],
) -> None:
    pusher, poster, identity = make_pusher()
    pusher.offer(snapshot("example.com/a"))
    wait_until(lambda: len(poster.posts) == 1)
    first_boot = identity.boot_id
    conflicts = iter([PushResult(Outcome.STALE, 409)])
    poster.answer = lambda p: next(conflicts, PushResult(Outcome.ACCEPTED, 200))
    pusher.offer(snapshot("example.com/b"))
    wait_until(lambda: len(poster.posts) == 4 and not pusher.pending())
    resent = poster.posts[2:]
    assert {p["resource"] for p in resent} == {"example.com/a", "example.com/b"}
    assert {p["source"]["boot_id"] for p in resent} == {identity.boot_id} != {first_boot}
    assert sorted(p["source"]["seq"] for p in resent) == [1, 2]


def test_refused_content_is_not_retried_until_it_changes(
    make_pusher: Callable[..., tuple[Pusher, ScriptedPoster, SourceIdentity]],
) -> None:
    pusher, poster, _ = make_pusher()
    poster.answer = lambda p: (
        PushResult(Outcome.REJECTED, 422, "devices.0.ID: bad")
        if p["devices"][0]["health"] == "Bad"
        else PushResult(Outcome.ACCEPTED, 200)
    )
    pusher.offer(snapshot("example.com/a", "Bad"))
    wait_until(lambda: len(poster.posts) == 1 and not pusher.pending())
    pusher.offer(snapshot("example.com/a", "Bad"))
    pusher.offer(snapshot("example.com/b"))
    wait_until(lambda: len(poster.posts) == 2)
    pusher.offer(snapshot("example.com/a", "Healthy"))
    wait_until(lambda: len(poster.posts) == 3)
    assert poster.sent() == [
        ("example.com/a", "Bad"),
        ("example.com/b", "Healthy"),
        ("example.com/a", "Healthy"),
    ]


def test_unauthorized_waits_but_retries_as_soon_as_the_token_changes(
    make_pusher: Callable[..., tuple[Pusher, ScriptedPoster, SourceIdentity]],
) -> None:
    token = {"version": 1}
    pusher, poster, _ = make_pusher(
        token_signature=lambda: (token["version"], 0, 0, 0), auth_retry=3600.0
    )
    poster.answer = lambda p: (
        PushResult(Outcome.UNAUTHORIZED, 401)
        if token["version"] == 1
        else PushResult(Outcome.ACCEPTED, 200)
    )
    pusher.offer(snapshot("example.com/a"))
    wait_until(lambda: len(poster.posts) == 1)
    token["version"] = 2
    wait_until(lambda: not pusher.pending(), message="retry after the token change")
    assert len(poster.posts) == 2


def interpret(response: httpx.Response | Exception, token_file: Path) -> PushResult:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == "Bearer secret"
        if isinstance(response, Exception):
            raise response
        return response

    client = IngestClient(
        "http://service", TokenSource(token_file), transport=httpx.MockTransport(handler)
    )
    try:
        return client.post("/api/v1/ingest/listandwatch", {"node": "n"})
    finally:
        client.close()


def test_every_answer_maps_to_an_outcome(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("secret\n")
    error = {"error": {"code": "invalid", "message": "bad", "details": [{"field": "node"}]}}
    cases: list[tuple[httpx.Response | Exception, Outcome]] = [
        (httpx.Response(200, json={"changed": True, "duplicate": False}), Outcome.ACCEPTED),
        (httpx.Response(200, text="<html>proxy error page</html>"), Outcome.RETRY),
        (httpx.Response(200, json=["not", "a", "result"]), Outcome.RETRY),
        (httpx.Response(409, json=error), Outcome.STALE),
        (httpx.Response(401, json=error), Outcome.UNAUTHORIZED),
        (httpx.Response(403, text="forbidden"), Outcome.UNAUTHORIZED),
        (httpx.Response(422, json=error), Outcome.REJECTED),
        (httpx.Response(429, text="slow down"), Outcome.RETRY),
        (httpx.Response(500, text="boom"), Outcome.RETRY),
        (httpx.Response(502, text=""), Outcome.RETRY),
        (httpx.ConnectError("refused"), Outcome.RETRY),
        (httpx.RemoteProtocolError("reset"), Outcome.RETRY),
    ]
    for response, outcome in cases:
        assert interpret(response, token_file).outcome is outcome, response
    assert "node" in interpret(httpx.Response(422, json=error), token_file).detail


def test_token_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    tokens = TokenSource(path)
    assert tokens.current() == "first"
    replacement = tmp_path / "token.new"
    replacement.write_text("second\n")
    replacement.rename(path)
    assert tokens.current() == "second"
    path.write_text("")  # caught mid-rewrite: keep the last good token
    assert tokens.current() == "second"
    path.unlink()
    assert tokens.current() == "second"
    assert TokenSource(None, " from-env ").current() == "from-env"
