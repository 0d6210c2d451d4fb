"""Bearer tokens: 401 and 403, scopes, hashing, revocation, auth off, the token CLI."""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from devicedeck.config import AuthMode, Settings
from devicedeck.credentials.tokens import Principal, TokenCache
from devicedeck.main import create_app

from .conftest import Api, MakeApi, dev, listandwatch

DEVICES = "/api/v1/devices"
LAW = "/api/v1/ingest/listandwatch"
TOKENS = "/api/v1/tokens"

PROTECTED = [
    ("GET", DEVICES),
    ("GET", "/api/v1/nodes"),
    ("GET", "/api/v1/events"),
    ("POST", LAW),
    ("GET", TOKENS),
]


def call(client: TestClient, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    if method == "POST":
        return client.post(path, json=listandwatch("node-a", [dev("gpu-0")], 1), headers=headers)
    return client.request(method, path, headers=headers)


def assert_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    assert body["error"]["details"] == []


BAD_CREDENTIALS: list[dict[str, str]] = [
    {},
    {"Authorization": "Token abc"},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer    "},
    {"Authorization": "Basic dXNlcjpwYXNz"},
    {"Authorization": "bearer-abc"},
    {"Authorization": "ddk_abc"},
    {"Authorization": "Bearer ddk_not-a-token-anyone-made"},
    {"Cookie": "devicedeck_token=ddk_not-a-token-anyone-made"},
    {"Cookie": "devicedeck_session=dds_not-a-session-anyone-started"},
]


def test_missing_malformed_or_unknown_token_is_401(
    client: TestClient, make_token: Callable[..., str]
) -> None:
    make_token("read", "ingest", "admin")
    for method, path in PROTECTED:
        for headers in BAD_CREDENTIALS:
            response = call(client, method, path, headers)
            try:
                assert_error(response, 401, "unauthorized")
                assert response.headers["www-authenticate"] == "Bearer"
            except AssertionError as e:
                raise AssertionError(f"{method} {path} with {headers}") from e
    # Nothing was ingested on the way.
    admin = bearer(make_token("admin"))
    assert client.get(DEVICES, headers=admin).json()["count"] == 0


def test_revoked_token_is_401(api: Api, make_token: Callable[..., str]) -> None:
    token = make_token("read", name="ci-reader")
    headers = {"Authorization": f"Bearer {token}"}
    assert api.client.get(DEVICES, headers=headers).status_code == 200
    revoked = api.client.delete(f"{TOKENS}/ci-reader", headers=api.headers)
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["revoked_at"] is not None
    assert_error(api.client.get(DEVICES, headers=headers), 401, "unauthorized")
    # Revoking again is harmless; an unknown name is a 404.
    assert api.client.delete(f"{TOKENS}/ci-reader", headers=api.headers).status_code == 200
    assert_error(api.client.delete(f"{TOKENS}/nobody", headers=api.headers), 404, "not_found")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_wrong_scope_is_403(client: TestClient, make_token: Callable[..., str]) -> None:
    reader = bearer(make_token("read"))
    ingester = bearer(make_token("ingest"))
    assert_error(call(client, "POST", LAW, reader), 403, "forbidden")
    assert_error(client.get(DEVICES, headers=ingester), 403, "forbidden")
    assert_error(client.get("/api/v1/events", headers=ingester), 403, "forbidden")
    assert_error(client.get(TOKENS, headers=reader), 403, "forbidden")
    assert_error(client.get(TOKENS, headers=ingester), 403, "forbidden")
    # Each scope does work where it belongs.
    assert call(client, "POST", LAW, ingester).status_code == 200
    assert client.get(DEVICES, headers=reader).status_code == 200


def test_admin_scope_implies_read_and_ingest(
    client: TestClient, make_token: Callable[..., str]
) -> None:
    admin = bearer(make_token("admin"))
    assert call(client, "POST", LAW, admin).status_code == 200
    assert client.get(DEVICES, headers=admin).json()["count"] == 1
    assert client.get(TOKENS, headers=admin).status_code == 200


def test_a_token_in_a_cookie_is_refused(client: TestClient, make_token: Callable[..., str]) -> None:
    """Cookies hold dashboard session ids only: a valid API token in the old cookie (the one
    earlier versions set), or in the session cookie, authenticates nothing."""
    token = make_token("read")
    assert client.get(DEVICES, headers=bearer(token)).status_code == 200
    for cookie in ("devicedeck_token", "devicedeck_session"):
        client.cookies.set(cookie, token)
        try:
            assert_error(client.get(DEVICES), 401, "unauthorized")
        finally:
            client.cookies.clear()


def test_tokens_are_stored_only_as_hashes(api: Api, db_rows: Callable[..., dict]) -> None:
    created = api.client.post(
        TOKENS,
        json={"name": "agent-1", "scopes": ["ingest"], "node": "node-a"},
        headers=api.headers,
    )
    assert created.status_code == 201, created.text
    plaintext = created.json()["token"]
    assert len(plaintext) >= 40
    # The token works, and is never shown again.
    assert call(api.client, "POST", LAW, bearer(plaintext)).status_code == 200
    listing = api.client.get(TOKENS, headers=api.headers)
    assert plaintext not in listing.text
    assert "agent-1" in listing.text
    dump = repr(db_rows(skip={}))
    assert plaintext not in dump
    assert plaintext[4:] not in dump
    assert hashlib.sha256(plaintext.encode()).hexdigest() in dump


def test_token_creation_rules(api: Api) -> None:
    def create(body: object) -> httpx.Response:
        return api.client.post(TOKENS, json=body, headers=api.headers)

    created = create({"name": "a", "scopes": ["read"]})
    assert created.status_code == 201
    # The one answer that shows the secret may be kept by no cache.
    assert created.headers["cache-control"] == "no-store"
    duplicate = create({"name": "a", "scopes": ["read"]})
    assert duplicate.status_code == 422
    assert ("name", "unique") in [
        (d["field"], d["rule"]) for d in duplicate.json()["error"]["details"]
    ]
    bad_scope = create({"name": "b", "scopes": ["root"]})
    assert bad_scope.status_code == 422
    assert bad_scope.json()["error"]["details"][0]["field"] == "scope"
    assert create({"name": "", "scopes": ["read"]}).status_code == 422
    assert create({"name": "c", "scopes": []}).status_code == 422


def test_last_used_is_recorded(api: Api, make_token: Callable[..., str]) -> None:
    token = make_token("read", name="watcher")
    before = {t["name"]: t for t in api.get(TOKENS)["results"]}
    assert before["watcher"]["last_used_at"] is None
    api.client.get(DEVICES, headers=bearer(token))
    after = {t["name"]: t for t in api.get(TOKENS)["results"]}
    assert after["watcher"]["last_used_at"] is not None


def test_auth_off_lets_anonymous_visitors_read_only_and_says_so_loudly(
    settings: Settings, make_token: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="devicedeck.main")
    ingest = make_token("ingest", name="agent")
    admin = make_token("admin", name="ops")
    reader = make_token("read", name="viewer")
    app = create_app(settings.model_copy(update={"auth": AuthMode.OFF}))
    with TestClient(app) as client:
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert any("AUTHENTICATION IS OFF" in r.getMessage() for r in warnings)
        # Anonymous: reading works, writing of any kind needs a token.
        refused = call(client, "POST", LAW, {})
        assert refused.status_code == 401, refused.text
        assert "'ingest' scope" in refused.json()["error"]["message"]
        assert refused.headers["www-authenticate"] == "Bearer"
        minted = client.post(TOKENS, json={"name": "x", "scopes": ["admin"]})
        assert minted.status_code == 401, minted.text
        assert client.get(TOKENS).status_code == 401
        assert client.get(DEVICES).json()["count"] == 0
        # With a token, its scopes apply as with auth on.
        assert call(client, "POST", LAW, bearer(ingest)).status_code == 200
        assert client.get(DEVICES).json()["count"] == 1
        assert client.get(TOKENS, headers=bearer(admin)).status_code == 200
        assert call(client, "POST", LAW, bearer(reader)).status_code == 403
        # A token that is presented is checked even with auth off.
        assert client.get(DEVICES, headers=bearer("ddk_nonsense")).status_code == 401


def test_auth_on_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEVICEDECK_AUTH", raising=False)
    assert Settings().auth is AuthMode.TOKEN
    monkeypatch.setenv("DEVICEDECK_AUTH", "off")
    assert Settings().auth is AuthMode.OFF


def devicedeck(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEVICEDECK_DATABASE_URL": database_url}
    return subprocess.run(
        [sys.executable, "-m", "devicedeck.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
        check=False,
    )


def test_token_cli_create_list_revoke(
    database_url: str, make_api: MakeApi, db_rows: Callable[..., dict]
) -> None:
    created = devicedeck(
        database_url,
        "token",
        "create",
        "--name",
        "node-agent",
        "--scope",
        "ingest",
        "--scope",
        "read",
        "--node",
        "node-a",
    )
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip().splitlines()[-1]
    assert token.startswith("ddk_") and " " not in token
    assert token not in repr(db_rows(skip={}))

    api = make_api(token_cache_seconds=1.0)
    assert call(api.client, "POST", LAW, bearer(token)).status_code == 200
    assert api.client.get(DEVICES, headers=bearer(token)).status_code == 200

    listing = devicedeck(database_url, "token", "list")
    assert listing.returncode == 0, listing.stderr
    [row] = [line for line in listing.stdout.splitlines() if line.startswith("node-agent")]
    assert "ingest,read" in row
    assert token not in listing.stdout

    revoked = devicedeck(database_url, "token", "revoke", "node-agent")
    assert revoked.returncode == 0, revoked.stderr
    # Revoked by another process: the service trusts its cached check (made before the
    # revocation) for a second at most, so once that second has passed it is refused.
    time.sleep(1.1)
    assert_error(api.client.get(DEVICES, headers=bearer(token)), 401, "unauthorized")


def test_token_cli_errors(
    database_url: str,
    make_token: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The error paths, in-process: a subprocess per case costs a second each."""
    from devicedeck.cli import main

    make_token("read", name="taken")
    monkeypatch.setenv("DEVICEDECK_DATABASE_URL", database_url)
    assert main(["token", "create", "--name", "taken", "--scope", "read"]) == 2
    assert "exists already" in capsys.readouterr().err
    assert main(["token", "revoke", "no-such-token"]) == 1
    assert "no-such-token" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["token", "create", "--name", "x", "--scope", "root"])
    assert "invalid choice" in capsys.readouterr().err


def test_token_cache_keeps_successes_for_its_time_only() -> None:
    now = [100.0]
    cache = TokenCache(ttl=10, clock=lambda: now[0])
    reader = Principal(name="reader", scopes=frozenset({"read"}))
    assert cache.get("ddk_a") is None
    cache.put("ddk_a", reader)
    assert cache.get("ddk_a") == reader
    assert cache.get("ddk_b") is None
    now[0] += 9.9
    assert cache.get("ddk_a") == reader
    now[0] += 0.1
    assert cache.get("ddk_a") is None, "an expired check must go back to the database"
    cache.put("ddk_a", reader)
    cache.forget("reader")
    assert cache.get("ddk_a") is None, "a revocation in this process applies at once"
    off = TokenCache(ttl=0, clock=lambda: now[0])
    off.put("ddk_a", reader)
    assert off.get("ddk_a") is None


def test_token_cache_holds_hashes_not_tokens() -> None:
    cache = TokenCache(ttl=10)
    cache.put("ddk_secret", Principal(name="agent", scopes=frozenset({"ingest"})))
    assert "ddk_secret" not in repr(vars(cache))
    assert hashlib.sha256(b"ddk_secret").hexdigest() in repr(vars(cache))
