"""Dashboard sessions: the cookie holds a random session id kept hashed on the server; it ends
on sign-out, on revocation of its token, when idle too long and at its maximum age, at once on
every service process that shares the database; cookies are Secure behind a TLS proxy."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from http.cookies import SimpleCookie
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.config import Settings
from devicedeck.credentials.dashboard_sessions import (
    SessionLimits,
    authenticate_session,
    end_session,
    live_sessions,
    record_session_use,
    start_session,
)
from devicedeck.credentials.tokens import authenticate, create_token, revoke_token
from devicedeck.db import write_session
from devicedeck.inventory.models import DashboardSession
from devicedeck.main import create_app

from .conftest import MakeToken
from .servers import served_processes
from .signin import SESSION_COOKIE, sign_in

DEVICES = "/api/v1/devices"
LIMITS = SessionLimits(idle=timedelta(hours=1), max_age=timedelta(days=1))


def session_cookie(response: httpx.Response) -> SimpleCookie:
    for header in response.headers.get_list("set-cookie"):
        cookie: SimpleCookie = SimpleCookie()
        cookie.load(header)
        if SESSION_COOKIE in cookie and cookie[SESSION_COOKIE].value:
            return cookie
    raise AssertionError(f"no session cookie set: {response.headers.get_list('set-cookie')}")


@pytest.fixture
def two_replicas(settings: Settings) -> Iterator[tuple[TestClient, TestClient]]:
    """Two app instances, each with its own engine and caches, on one database."""
    with ExitStack() as stack:
        first = stack.enter_context(TestClient(create_app(settings)))
        second = stack.enter_context(TestClient(create_app(settings)))
        yield first, second


def test_the_cookie_holds_a_session_id_stored_only_hashed(
    client: TestClient, make_token: MakeToken, session_factory: sessionmaker[Session]
) -> None:
    token = make_token("read", name="operator")
    cookie = session_cookie(sign_in(client, token))[SESSION_COOKIE]
    assert cookie.value.startswith("dds_") and token not in cookie.value
    assert int(cookie["max-age"]) == 7 * 24 * 3600
    with session_factory() as session:
        stored = session.scalars(select(DashboardSession)).one()
    assert stored.id_hash == hashlib.sha256(cookie.value.encode()).hexdigest()
    assert client.get(DEVICES).status_code == 200
    assert client.get("/nodes", follow_redirects=False).status_code == 200


def test_an_old_cookie_holding_a_token_no_longer_signs_in(
    client: TestClient, make_token: MakeToken
) -> None:
    token = make_token("read", "admin")
    for name in ("devicedeck_token", SESSION_COOKIE):
        client.cookies.set(name, token)
        page = client.get("/nodes", follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"].startswith("/login")
        assert client.get(DEVICES).status_code == 401
        client.cookies.clear()
    # Signing in again replaces the old cookie and deletes the one holding the token.
    client.cookies.set("devicedeck_token", token)
    response = sign_in(client, token)
    deleted = [h for h in response.headers.get_list("set-cookie") if "devicedeck_token=" in h]
    assert deleted and "Max-Age=0" in deleted[0]


def test_sign_out_ends_the_session_on_every_replica_at_once(
    two_replicas: tuple[TestClient, TestClient], make_token: MakeToken
) -> None:
    first, second = two_replicas
    session_id = session_cookie(sign_in(first, make_token("read")))[SESSION_COOKIE].value
    second.cookies.set(SESSION_COOKIE, session_id)
    assert second.get(DEVICES).status_code == 200
    page = first.get("/")
    csrf = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    out = first.post(
        "/logout",
        data={"csrf_token": csrf},
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert out.status_code == 303
    # The other replica, still presenting the cookie, is refused on its very next request.
    refused = second.get(DEVICES)
    assert refused.status_code == 401
    assert "session has ended" in refused.json()["error"]["message"]
    assert second.get("/", follow_redirects=False).status_code == 303
    # So is the same browser if it kept the cookie anyway.
    first.cookies.set(SESSION_COOKIE, session_id)
    assert first.get(DEVICES).status_code == 401


def test_revoking_the_token_ends_its_sessions_on_every_replica_at_once(
    two_replicas: tuple[TestClient, TestClient], make_token: MakeToken
) -> None:
    first, second = two_replicas
    admin = {"Authorization": f"Bearer {make_token('admin', name='root')}"}
    sign_in(first, make_token("read", name="viewer"))
    second_browser_session = session_cookie(sign_in(second, make_token("read", name="other")))
    assert first.get(DEVICES).status_code == 200
    revoked = second.delete("/api/v1/tokens/viewer", headers=admin)
    assert revoked.status_code == 200
    assert first.get(DEVICES).status_code == 401
    assert first.get("/nodes", follow_redirects=False).status_code == 303
    # Another token's session goes on.
    assert second_browser_session[SESSION_COOKIE].value
    assert second.get(DEVICES).status_code == 200


def test_an_idle_session_ends(settings: Settings, make_token: MakeToken) -> None:
    idle = settings.model_copy(update={"session_idle_seconds": 1.0})
    with TestClient(create_app(idle)) as client:
        sign_in(client, make_token("read"))
        # Unused for twice the idle timeout: over whatever the machine's speed.
        time.sleep(2.0)
        assert client.get(DEVICES).status_code == 401
        assert client.get("/", follow_redirects=False).status_code == 303


def test_session_lifetime_rules(session_factory: sessionmaker[Session]) -> None:
    start = utcnow()
    with write_session(session_factory) as session:
        token, plaintext = create_token(session, "viewer", ["read"], start)
        token_id = token.id
        cookie = start_session(session, token_id, start, LIMITS)

    def alive(at: timedelta) -> bool:
        with session_factory() as session:
            return authenticate_session(session, cookie, start + at, LIMITS) is not None

    assert alive(timedelta(minutes=59))
    assert not alive(timedelta(minutes=61))  # idle for over an hour
    # Used now and then, it lives on until its maximum age, and not a moment longer.
    for minutes in range(50, 24 * 60, 50):
        at = start + timedelta(minutes=minutes)
        with write_session(session_factory) as session:
            found = authenticate_session(session, cookie, at, LIMITS)
            assert found is not None and found.touch, minutes
            assert found.principal.name == "viewer" and found.principal.has("read")
            record_session_use(session, found.principal.session_id or 0, token_id, at)
    assert alive(timedelta(hours=23, minutes=59))
    assert not alive(timedelta(hours=24))
    # A use within a minute of the last one is not written again.
    with session_factory() as session:
        found = authenticate_session(session, cookie, start + timedelta(minutes=1300), LIMITS)
        assert found is not None and not found.touch
        assert authenticate(session, plaintext, start) is not None


def test_sign_out_and_revocation_in_the_database(session_factory: sessionmaker[Session]) -> None:
    now = utcnow()
    with write_session(session_factory) as session:
        token, _ = create_token(session, "viewer", ["read"], now)
        other, _ = create_token(session, "other", ["read"], now)
        ours = start_session(session, token.id, now, LIMITS)
        kept = start_session(session, token.id, now, LIMITS)
        theirs = start_session(session, other.id, now, LIMITS)
        ids = {authenticate_session(session, c, now, LIMITS) for c in (ours, kept, theirs)}
    all_ids = {f.principal.session_id or 0 for f in ids if f is not None}
    assert len(all_ids) == 3
    with write_session(session_factory) as session:
        end_session(session, ours, now)
        assert authenticate_session(session, ours, now, LIMITS) is None
        assert authenticate_session(session, kept, now, LIMITS) is not None
        assert len(live_sessions(session, all_ids, now, LIMITS)) == 2
        revoke_token(session, "viewer", now)
    with session_factory() as session:
        assert authenticate_session(session, kept, now, LIMITS) is None
        assert authenticate_session(session, theirs, now, LIMITS) is not None
        assert len(live_sessions(session, all_ids, now, LIMITS)) == 1
    # The next sign-in clears the rows of sessions that can never be used again.
    with write_session(session_factory) as session:
        start_session(session, other.id, now, LIMITS)
    with session_factory() as session:
        assert len(session.scalars(select(DashboardSession)).all()) == 3


def test_secure_cookies_setting_marks_cookies_secure_over_plain_http(
    settings: Settings, make_token: MakeToken
) -> None:
    forced = settings.model_copy(update={"secure_cookies": True})
    with TestClient(create_app(forced)) as client:
        response = sign_in(client, make_token("read"))
        secure = {
            name: morsel["secure"]
            for header in response.headers.get_list("set-cookie")
            for name, morsel in SimpleCookie(header).items()
        }
        assert secure[SESSION_COOKIE] is True
    csrf = client.get("/login").headers.get_list("set-cookie")
    assert csrf and all("Secure" in header for header in csrf)


def test_serve_believes_forwarded_proto_only_from_the_proxies_it_is_told_of(
    database_url: str, make_token: MakeToken, tmp_path: Path
) -> None:
    """`devicedeck serve --forwarded-allow-ips` reaches uvicorn: a proxy it trusts makes the
    request HTTPS (X-Forwarded-Proto), so the session cookie is Secure; from any other address
    the header is ignored."""
    token = make_token("read")
    env = {"DEVICEDECK_DATABASE_URL": database_url}
    with served_processes(
        [env, env],
        tmp_path,
        args=[["--forwarded-allow-ips", "*"], ["--forwarded-allow-ips", "192.0.2.1"]],
    ) as (trusting, distrusting):
        outcomes = []
        for served in (trusting, distrusting):
            with httpx.Client(
                base_url=served.url,
                headers={"X-Forwarded-Proto": "https"},
                timeout=60,
            ) as client:
                outcomes.append(session_cookie(sign_in(client, token))[SESSION_COOKIE]["secure"])
    assert outcomes == [True, ""]
