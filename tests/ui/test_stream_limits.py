"""Live-update streams over real HTTP: at most DEVICEDECK_MAX_LIVE_STREAMS per token or
session (the next one gets 429), and an open stream closes once its token is revoked or its
dashboard session ends, whichever process did it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.config import Settings
from devicedeck.credentials.tokens import revoke_token
from devicedeck.db import write_session
from devicedeck.inventory.models import ApiToken

from .conftest import MakeToken
from .servers import threaded_server, wait_until
from .signin import sign_in
from .test_live import EVENT_DEADLINE, open_stream

STREAM = "/ui/stream?since=0"


def try_stream(client: httpx.Client, headers: dict[str, str]) -> tuple[int, str]:
    """Status and (for a refusal) body of an attempt to open a stream; never waits for an
    open stream's end."""
    response = client.send(client.build_request("GET", STREAM, headers=headers), stream=True)
    try:
        if response.status_code == 200:
            return 200, ""
        return response.status_code, response.read().decode()
    finally:
        response.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def stream_owners(app: Any) -> set[tuple[str, str | int]]:
    return {(owner.kind, owner.key) for owner in app.state.live_streams.owners()}


def token_id(app: Any, name: str) -> int:
    with app.state.session_factory() as session:
        found: int = session.scalars(select(ApiToken.id).where(ApiToken.name == name)).one()
    return found


def ends(lines: Iterator[str]) -> bool:
    """Reads the stream to its end; False if it is still open at the deadline (keepalive
    comments arrive every 15 s, so the deadline is looked at while it stays open)."""
    deadline = time.monotonic() + EVENT_DEADLINE
    return all(time.monotonic() <= deadline for _ in lines)


def test_a_token_holds_at_most_the_limit_of_streams(
    settings: Settings, make_token: MakeToken
) -> None:
    limited = settings.model_copy(update={"max_live_streams": 3})
    reader, other = make_token("read", name="reader"), make_token("read", name="other")
    with (
        threaded_server(limited) as (url, app),
        httpx.Client(base_url=url, timeout=EVENT_DEADLINE) as client,
    ):
        streams = [open_stream(client, STREAM, bearer(reader)) for _ in range(3)]
        try:
            status, message = try_stream(client, bearer(reader))
            assert status == 429
            assert "3 live update streams" in message
            assert "DEVICEDECK_MAX_LIVE_STREAMS" in message
            # Other tokens, and a browser signed in with the same token, have their own.
            streams.append(open_stream(client, STREAM, bearer(other)))
            sign_in(client, reader)
            streams.append(open_stream(client, STREAM, {}))
            client.cookies.clear()
            # Closing one makes room for one more.
            streams.pop(0).close()
            wait_until(
                lambda: app.state.live.subscriber_count == 4, what="the server to see it closed"
            )
            streams.append(open_stream(client, STREAM, bearer(reader)))
            assert try_stream(client, bearer(reader))[0] == 429
        finally:
            for stream in streams:
                stream.close()


def test_revoking_the_token_closes_its_open_stream(
    settings: Settings, make_token: MakeToken, session_factory: sessionmaker[Session]
) -> None:
    checked = settings.model_copy(update={"stream_check_seconds": 0.5})
    reader, other = make_token("read", name="reader"), make_token("read", name="other")
    with (
        threaded_server(checked) as (url, app),
        httpx.Client(base_url=url, timeout=EVENT_DEADLINE) as client,
    ):
        doomed = open_stream(client, STREAM, bearer(reader))
        kept = open_stream(client, STREAM, bearer(other))
        try:
            lines = doomed.iter_lines()
            assert next(lines) == "retry: 2000"
            wait_until(lambda: app.state.live.subscriber_count == 2, what="both streams")
            # Revoked in the database, as the CLI or another replica does: this process's
            # token cache never hears of it.
            with write_session(session_factory) as session:
                revoke_token(session, "reader", utcnow())
            assert ends(lines)
            wait_until(lambda: app.state.live.subscriber_count == 1, what="one stream left")
            # The other token's stream goes on; the revoked one's place is freed once its
            # response has finished.
            other_only = {("token", token_id(app, "other"))}
            wait_until(lambda: stream_owners(app) == other_only, what="the place freed")
        finally:
            doomed.close()
            kept.close()


def test_signing_out_closes_the_sessions_open_stream(
    settings: Settings, make_token: MakeToken
) -> None:
    checked = settings.model_copy(update={"stream_check_seconds": 0.5})
    with (
        threaded_server(checked) as (url, app),
        httpx.Client(base_url=url, timeout=EVENT_DEADLINE) as browser,
    ):
        sign_in(browser, make_token("read"))
        stream = open_stream(browser, STREAM, {})
        try:
            lines = stream.iter_lines()
            assert next(lines) == "retry: 2000"
            page = browser.get("/")
            csrf = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
            session = browser.cookies["devicedeck_session"]
            out = browser.post(
                "/logout",
                data={"csrf_token": csrf},
                headers={"Origin": url},
                follow_redirects=False,
            )
            assert out.status_code == 303
            assert ends(lines)
            wait_until(lambda: app.state.live.subscriber_count == 0, what="no stream left")
            # Reconnecting with the old cookie is refused.
            browser.cookies.set("devicedeck_session", session)
            assert try_stream(browser, {})[0] == 401
        finally:
            stream.close()
