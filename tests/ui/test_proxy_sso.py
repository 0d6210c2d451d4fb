"""Single sign-on through an authenticating proxy: the user header is believed only from the
proxy's networks; listed users are admins, others read; pages and events name the user."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from devicedeck.config import AuthMode, Settings
from devicedeck.main import create_app

from .conftest import MakeToken
from .dom import parse
from .servers import ROOT, served_processes

HEADER = "X-Forwarded-User"
PROXY = ("10.20.0.7", 40000)
ELSEWHERE = ("192.0.2.50", 40000)
DEVICES = "/api/v1/devices"
TOKENS = "/api/v1/tokens"


def sso(settings: Settings, **overrides: object) -> Settings:
    return settings.model_copy(
        update={
            "proxy_user_header": HEADER,
            "proxy_trusted_cidrs": "10.20.0.0/16, fd00::/8",
            "proxy_admins": "alice@example.com, ops",
            **overrides,
        }
    )


@pytest.fixture
def via_proxy(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(sso(settings)), client=PROXY) as client:
        yield client


def test_a_user_named_by_the_proxy_reads(via_proxy: TestClient) -> None:
    user = {HEADER: "bob@example.com"}
    assert via_proxy.get(DEVICES, headers=user).status_code == 200
    page = parse(via_proxy.get("/nodes", headers=user, follow_redirects=False).text)
    who = page.one("span", class_="who")
    assert who.text == "bob@example.com"
    assert "single sign-on" in who.attrs["title"]
    # The proxy signs users out, not the dashboard.
    assert page.find("form", action="/logout") is None
    # Read only: no admin API.
    denied = via_proxy.get(TOKENS, headers=user)
    assert denied.status_code == 403
    assert "'admin' scope" in denied.json()["error"]["message"]
    # Without the header, nobody is signed in.
    assert via_proxy.get(DEVICES).status_code == 401


def test_users_listed_as_admins_are_admins(via_proxy: TestClient) -> None:
    for user in ("alice@example.com", "ops"):
        listing = via_proxy.get(TOKENS, headers={HEADER: user})
        assert listing.status_code == 200, user
    created = via_proxy.post(
        TOKENS, json={"name": "made-by-sso", "scopes": ["read"]}, headers={HEADER: "ops"}
    )
    assert created.status_code == 201
    # A name is matched exactly: neither a prefix nor another case is an admin.
    for user in ("opsx", "OPS", "alice"):
        assert via_proxy.get(TOKENS, headers={HEADER: user}).status_code == 403, user


def test_the_header_from_outside_the_proxy_networks_is_ignored(
    settings: Settings, make_token: MakeToken
) -> None:
    with TestClient(create_app(sso(settings)), client=ELSEWHERE) as client:
        refused = client.get(DEVICES, headers={HEADER: "alice@example.com"})
        assert refused.status_code == 401
        message = refused.json()["error"]["message"]
        assert "DEVICEDECK_PROXY_TRUSTED_CIDRS" in message and "192.0.2.50" in message
        page = client.get("/", headers={HEADER: "alice@example.com"}, follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"].startswith("/login")
        # A token still works from there, and the header changes nothing about it.
        reader = {"Authorization": f"Bearer {make_token('read')}"}
        assert client.get(DEVICES, headers=reader).status_code == 200
        with_header = client.get(TOKENS, headers={**reader, HEADER: "alice@example.com"})
        assert with_header.status_code == 403


def test_with_auth_off_an_untrusted_header_leaves_the_visitor_anonymous(
    settings: Settings,
) -> None:
    off = sso(settings, auth=AuthMode.OFF)
    with TestClient(create_app(off), client=ELSEWHERE) as client:
        page = parse(client.get("/", headers={HEADER: "alice@example.com"}).text)
        assert page.find("span", class_="who") is None
        assert client.get(TOKENS, headers={HEADER: "alice@example.com"}).status_code == 401
    with TestClient(create_app(off), client=PROXY) as client:
        assert client.get(TOKENS, headers={HEADER: "alice@example.com"}).status_code == 200


def test_a_header_naming_no_usable_user_is_refused(via_proxy: TestClient) -> None:
    for bad in ("", "   ", "x" * 254):
        refused = via_proxy.get(DEVICES, headers={HEADER: bad})
        assert refused.status_code == 401, bad
        assert HEADER in refused.json()["error"]["message"]


def test_without_the_setting_the_header_means_nothing(
    settings: Settings, make_token: MakeToken
) -> None:
    with TestClient(create_app(settings), client=PROXY) as client:
        assert client.get(DEVICES, headers={HEADER: "alice@example.com"}).status_code == 401


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"DEVICEDECK_PROXY_USER_HEADER": HEADER}, "DEVICEDECK_PROXY_TRUSTED_CIDRS"),
        (
            {
                "DEVICEDECK_PROXY_USER_HEADER": HEADER,
                "DEVICEDECK_PROXY_TRUSTED_CIDRS": "10.0.0.0/33",
            },
            "DEVICEDECK_PROXY_TRUSTED_CIDRS",
        ),
        (
            {
                "DEVICEDECK_PROXY_USER_HEADER": "X User",
                "DEVICEDECK_PROXY_TRUSTED_CIDRS": "10.0.0.0/8",
            },
            "DEVICEDECK_PROXY_USER_HEADER",
        ),
    ],
)
def test_bad_proxy_settings_stop_the_service_naming_the_setting(
    tmp_path: Path, env: dict[str, str], named: str
) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DEVICEDECK_")}
    clean |= {"DEVICEDECK_DATABASE_URL": f"sqlite:///{tmp_path}/devicedeck.db", **env}
    done = subprocess.run(
        [sys.executable, "-m", "devicedeck.cli", "serve", "--port", "0"],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert named in done.stderr
    assert not (tmp_path / "devicedeck.db").exists()


def test_serve_checks_the_connections_own_address_not_the_forwarded_one(
    database_url: str, tmp_path: Path
) -> None:
    """A proxy beside the service (oauth2-proxy as a sidecar, on loopback) adds
    X-Forwarded-For with the browser's address, and uvicorn, believing loopback, reports that
    address as the client: the user header is judged by the connection's own address all the
    same. A service whose trusted networks leave loopback out ignores the header."""
    base = {
        "DEVICEDECK_DATABASE_URL": database_url,
        "DEVICEDECK_PROXY_USER_HEADER": HEADER,
        "DEVICEDECK_PROXY_ADMINS": "alice@example.com",
    }
    beside = {**base, "DEVICEDECK_PROXY_TRUSTED_CIDRS": "127.0.0.1/32"}
    elsewhere = {**base, "DEVICEDECK_PROXY_TRUSTED_CIDRS": "10.20.0.0/16"}
    headers = {HEADER: "alice@example.com", "X-Forwarded-For": "203.0.113.9"}
    with served_processes([beside, elsewhere], tmp_path) as (trusting, other):
        assert httpx.get(trusting.url + TOKENS, headers=headers, timeout=60).status_code == 200
        ignored = httpx.get(other.url + TOKENS, headers=headers, timeout=60)
        assert ignored.status_code == 401
        assert "127.0.0.1" in ignored.json()["error"]["message"]
