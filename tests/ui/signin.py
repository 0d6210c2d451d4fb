"""Signing a test client in to the dashboard the way a browser does: the login form."""

from __future__ import annotations

import re

import httpx
from fastapi.testclient import TestClient

SESSION_COOKIE = "devicedeck_session"


def sign_in(client: TestClient | httpx.Client, token: str) -> httpx.Response:
    """Posts the token through the login form; the client keeps the session cookie."""
    page = client.get("/login")
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert found is not None, page.text[:2000]
    origin = str(client.base_url).rstrip("/")
    csrf = found.group(1)
    # The form token's cookie goes along explicitly: when the service believes the request
    # came over HTTPS it is Secure, and an http:// client would not send it back by itself.
    response = client.post(
        "/login",
        data={"token": token, "csrf_token": csrf},
        headers={"Origin": origin, "Cookie": f"devicedeck_csrf={csrf}"},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text[:2000]
    return response
