"""Browser-facing protections: security headers on HTML, and refusing cross-site form posts.

Cross-site requests are refused twice over: the Origin (or Referer) must name this host, and a
double-submit token (cookie plus form field) must match. Cookies are SameSite=Strict as well.
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import urlsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "frame-ancestors 'none'",
        "base-uri 'self'",
        "form-action 'self'",
    )
)
HTML_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "permissions-policy": "camera=(), microphone=(), geolocation=()",
}
CSRF_COOKIE = "devicedeck_csrf"
CSRF_FIELD = "csrf_token"


# The interactive API docs FastAPI serves load their scripts and styles from a CDN and inline;
# they keep FastAPI's defaults rather than the dashboard's policy.
EXEMPT_PREFIXES = ("/docs", "/redoc")


class SecurityHeadersMiddleware:
    """Adds the headers above to every HTML response (pure ASGI, so streams stay streams)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(EXEMPT_PREFIXES):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if headers.get("content-type", "").startswith("text/html"):
                    for name, value in HTML_HEADERS.items():
                        headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def is_https(request: Request) -> bool:
    return request.url.scheme == "https"


def secure_cookies(request: Request) -> bool:
    """Whether cookies get `Secure`: always with DEVICEDECK_SECURE_COOKIES=true (a proxy
    terminates TLS), else when the request came over HTTPS, as the server sees it (through a
    proxy it trusts with --forwarded-allow-ips, from X-Forwarded-Proto)."""
    return bool(request.app.state.settings.secure_cookies) or is_https(request)


def same_origin(request: Request) -> bool:
    """True when the request's Origin, or failing that its Referer, is this very host.

    Browsers send Origin on every POST; a request carrying neither is refused as well. Behind
    a reverse proxy that rewrites Host, X-Forwarded-Host names the host the browser used; a
    cross-site form cannot set that header, so accepting it opens nothing.
    """
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source or source == "null":
        return False
    parts = urlsplit(source)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    hosts = {request.headers.get("host", "")}
    hosts.update(h.strip() for h in request.headers.get("x-forwarded-host", "").split(","))
    return parts.netloc in hosts - {""}


def csrf_token(request: Request) -> tuple[str, bool]:
    """The token for forms on this page and whether it is new (so a cookie must be set).

    Made once per request, so the form field and the cookie always agree."""
    cached: tuple[str, bool] | None = getattr(request.state, "csrf_token", None)
    if cached is not None:
        return cached
    existing = request.cookies.get(CSRF_COOKIE, "")
    if len(existing) >= 32 and existing.isascii() and existing.isprintable():
        result = (existing, False)
    else:
        result = (secrets.token_urlsafe(32), True)
    request.state.csrf_token = result
    return result


def set_csrf_cookie(response: Response, request: Request, token: str) -> None:
    response.set_cookie(
        CSRF_COOKIE,
        token,
        httponly=True,
        samesite="strict",
        secure=secure_cookies(request),
        path="/",
    )


def csrf_matches(request: Request, submitted: str | None) -> bool:
    expected = request.cookies.get(CSRF_COOKIE)
    if not expected or not submitted:
        return False
    return hmac.compare_digest(expected.encode(), submitted.encode())
