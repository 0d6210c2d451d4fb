"""Headers, no inline script, login and logout, and refusing cross-site form posts."""

from __future__ import annotations

from http.cookies import SimpleCookie

import httpx
from fastapi.testclient import TestClient

from devicedeck.config import AuthMode, Settings
from devicedeck.main import create_app

from .conftest import Ingest, MakeToken, Pages, typical_cluster
from .dom import parse

ORIGIN = {"Origin": "http://testserver"}
SESSION = "devicedeck_session"


def set_cookies(response: httpx.Response) -> dict[str, SimpleCookie]:
    """Each Set-Cookie header parsed, by cookie name."""
    found: dict[str, SimpleCookie] = {}
    for header in response.headers.get_list("set-cookie"):
        cookie: SimpleCookie = SimpleCookie()
        cookie.load(header)
        for name in cookie:
            found[name] = cookie
    return found


def csrf_of(client: TestClient, path: str = "/login") -> str:
    page = parse(client.get(path).text)
    return page.one("input", name="csrf_token").attrs["value"]


def test_html_responses_carry_security_headers(pages: Pages, ingest: Ingest) -> None:
    typical_cluster(ingest)
    for path in ["/", "/nodes", "/nodes/node-a", "/devices", "/pods", "/events", "/nodes/x"]:
        headers = pages.get(path, expect=404 if path == "/nodes/x" else 200).headers
        policy = headers["content-security-policy"]
        csp = {p.split()[0]: p.split()[1:] for p in policy.split(";") if p.strip()}
        assert csp["default-src"] == ["'self'"] and csp["script-src"] == ["'self'"]
        assert csp["style-src"] == ["'self'"] and csp["frame-ancestors"] == ["'none'"]
        assert csp["img-src"] == ["'self'", "data:"] and csp["connect-src"] == ["'self'"]
        assert csp["base-uri"] == ["'self'"] and csp["form-action"] == ["'self'"]
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY"
        assert headers["referrer-policy"]
    login = pages.client.get("/login")
    assert "content-security-policy" in login.headers


def test_pages_have_no_inline_script_style_or_handlers(pages: Pages, ingest: Ingest) -> None:
    """What the CSP would block must not be there in the first place."""
    typical_cluster(ingest)
    for path in ["/", "/nodes", "/nodes/node-a", "/devices", "/devices/1", "/pods", "/events"]:
        page = pages.dom(path)
        for script in page.find_all("script"):
            assert script.attrs.get("src", "").startswith("/static/") and not script.text.strip()
        assert not page.find_all("style"), path
        for element in page.iter():
            assert "style" not in element.attrs, (path, element.tag)
            assert not [a for a in element.attrs if a.startswith("on")], (path, element.tag)
        config = page.one("meta", name="htmx-config").attrs["content"]
        assert '"includeIndicatorStyles":false' in config and '"allowEval":false' in config


def test_static_assets_are_served(client: TestClient) -> None:
    page = parse(client.get("/login").text)
    for link in [s.attrs["src"] for s in page.find_all("script")] + [
        page.one("link", rel="stylesheet").attrs["href"]
    ]:
        response = client.get(link)
        assert response.status_code == 200, link
        assert response.headers["content-type"].split(";")[0] in (
            "text/javascript",
            "application/javascript",
            "text/css",
        )


def test_unauthenticated_browser_is_sent_to_login(client: TestClient) -> None:
    response = client.get("/devices?health=Unhealthy", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=%2Fdevices%3Fhealth%3DUnhealthy"
    assert "HX-Request" in response.headers["vary"]
    # htmx requests get a header htmx turns into a full-page redirect.
    hx = client.get("/devices", headers={"HX-Request": "true"}, follow_redirects=False)
    assert hx.headers["HX-Redirect"] == "/login?next=%2Fdevices"
    # The event stream answers 401 rather than a redirect.
    assert client.get("/ui/stream").status_code == 401
    # A bad token in the cookie is no better than none.
    client.cookies.set("devicedeck_token", "ddk_nonsense")
    assert client.get("/", follow_redirects=False).status_code == 303


def test_login_sets_strict_httponly_cookie_and_pages_open(
    client: TestClient, make_token: MakeToken
) -> None:
    token = make_token("read", name="operator")
    csrf = csrf_of(client)
    response = client.post(
        "/login",
        data={"token": token, "csrf_token": csrf, "next": "/nodes"},
        headers=ORIGIN,
        follow_redirects=False,
    )
    assert response.status_code == 303 and response.headers["location"] == "/nodes"
    cookie = set_cookies(response)[SESSION][SESSION]
    # A session id, never the token itself.
    assert cookie.value.startswith("dds_") and token not in cookie.value
    assert cookie["httponly"] and cookie["samesite"] == "strict" and cookie["path"] == "/"
    assert not cookie["secure"]  # plain http here; see the https test
    page = parse(client.get("/nodes").text)
    assert page.one("span", class_="who").text == "operator"
    assert page.one("nav", aria_label="Main")


def test_login_cookie_is_secure_over_https(settings: Settings, make_token: MakeToken) -> None:
    token = make_token("read")
    with TestClient(create_app(settings), base_url="https://testserver") as client:
        csrf = csrf_of(client)
        response = client.post(
            "/login",
            data={"token": token, "csrf_token": csrf},
            headers={"Origin": "https://testserver"},
            follow_redirects=False,
        )
        assert response.status_code == 303
        assert set_cookies(response)[SESSION][SESSION]["secure"]


def test_login_refuses_bad_tokens_with_a_clear_message(
    client: TestClient, make_token: MakeToken
) -> None:
    cases = [("", 422, "Paste an API token"), ("ddk_wrong", 401, "unknown or has been revoked")]
    cases.append((make_token("ingest", name="agents"), 403, "lacks the read scope"))
    for token, status, message in cases:
        csrf = csrf_of(client)
        response = client.post("/login", data={"token": token, "csrf_token": csrf}, headers=ORIGIN)
        assert response.status_code == status
        assert message in parse(response.text).one(role="alert").text
        assert SESSION not in set_cookies(response)


def test_login_redirects_only_to_local_paths(client: TestClient, make_token: MakeToken) -> None:
    token = make_token("read")
    for target in ["//evil.example/", "https://evil.example/", "/\\evil.example"]:
        csrf = csrf_of(client)
        response = client.post(
            "/login",
            data={"token": token, "csrf_token": csrf, "next": target},
            headers=ORIGIN,
            follow_redirects=False,
        )
        assert response.headers["location"] == "/", target


def test_cross_site_posts_are_refused(client: TestClient, make_token: MakeToken) -> None:
    token = make_token("read")
    csrf = csrf_of(client)
    attempts = [
        ({"Origin": "https://evil.example"}, csrf),  # another site
        ({"Origin": "null"}, csrf),  # sandboxed frame
        ({}, csrf),  # no Origin and no Referer
        ({"Referer": "https://evil.example/page"}, csrf),
        (ORIGIN, "not-the-token"),  # right origin, forged form token
        (ORIGIN, ""),
    ]
    for headers, form_token in attempts:
        response = client.post(
            "/login",
            data={"token": token, "csrf_token": form_token},
            headers=headers,
            follow_redirects=False,
        )
        assert response.status_code == 403, headers
        assert SESSION not in set_cookies(response)
    # The same request from the dashboard itself (Referer is enough when Origin is absent).
    ok = client.post(
        "/login",
        data={"token": token, "csrf_token": csrf},
        headers={"Referer": "http://testserver/login"},
        follow_redirects=False,
    )
    assert ok.status_code == 303
    # Behind a proxy that rewrites Host, the host the browser used comes in X-Forwarded-Host.
    proxied = client.post(
        "/login",
        data={"token": token, "csrf_token": csrf},
        headers={"Origin": "https://deck.example", "X-Forwarded-Host": "deck.example"},
        follow_redirects=False,
    )
    assert proxied.status_code == 303


def test_logout_clears_the_cookie_and_needs_the_form_token(
    client: TestClient, make_token: MakeToken
) -> None:
    token = make_token("read")
    csrf = csrf_of(client)
    client.post("/login", data={"token": token, "csrf_token": csrf}, headers=ORIGIN)
    page = parse(client.get("/").text)
    logout_form = page.one("form", action="/logout")
    form_token = logout_form.one("input", name="csrf_token").attrs["value"]
    refused = client.post(
        "/logout", data={"csrf_token": form_token}, headers={"Origin": "https://evil.example"}
    )
    assert refused.status_code == 403
    assert client.get("/", follow_redirects=False).status_code == 200
    response = client.post(
        "/logout", data={"csrf_token": form_token}, headers=ORIGIN, follow_redirects=False
    )
    assert response.status_code == 303 and response.headers["location"] == "/login"
    cleared = set_cookies(response)[SESSION][SESSION]
    assert cleared.value == "" and cleared["max-age"] == "0"
    assert client.get("/", follow_redirects=False).status_code == 303


def test_auth_off_reads_without_login_and_signs_in_to_act(
    database_url: str, make_token: MakeToken
) -> None:
    settings = Settings(database_url=database_url, auth=AuthMode.OFF)
    with TestClient(create_app(settings)) as client:
        page = parse(client.get("/").text)
        assert page.one("span", class_="pill pill-warn").text == "Auth off: read-only"
        assert page.find("form", action="/logout") is None
        assert page.one("a", href="/login?next=/").text == "Sign in"
        # Signing in is how a visitor acts as admin (the advertise form) with auth off.
        assert client.get("/login?next=/pods").status_code == 200
        token = make_token("read", "admin", name="ops")
        response = client.post(
            "/login",
            data={"token": token, "csrf_token": csrf_of(client), "next": "/pods"},
            headers=ORIGIN,
            follow_redirects=False,
        )
        assert response.status_code == 303 and response.headers["location"] == "/pods"
        signed_in = parse(client.get("/pods").text)
        assert signed_in.one("span", class_="who").text == "ops"
        assert signed_in.find("form", action="/logout") is not None
