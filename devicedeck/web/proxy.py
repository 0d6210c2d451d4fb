"""Single sign-on through an authenticating proxy (oauth2-proxy and the like): the proxy names
the user in a header, and the service believes that header only from the proxy's networks.

The address checked is the one the connection came from, noted before uvicorn's own
X-Forwarded-For handling replaces it with the address the proxy reports (the browser's).
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from typing import Any, cast

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from devicedeck.config import Settings, split_list
from devicedeck.credentials.tokens import Principal

PEER_KEY = "devicedeck.peer"
MAX_USER_LENGTH = 253

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class RecordPeer:
    """Keeps the connection's own address in the scope, whatever later layers make of it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope[PEER_KEY] = scope.get("client")
        await self.app(scope, receive, send)


def behind_proxies(app: ASGIApp, forwarded_allow_ips: str) -> ASGIApp:
    """The app as `devicedeck serve` runs it: uvicorn's X-Forwarded-* handling for the
    proxies in `forwarded_allow_ips`, with the connection's own address noted first."""
    # uvicorn and Starlette spell the same ASGI callable with different types.
    headers = ProxyHeadersMiddleware(cast(Any, app), trusted_hosts=forwarded_allow_ips)
    return RecordPeer(cast(ASGIApp, headers))


def peer_host(request: Request) -> str | None:
    peer = request.scope.get(PEER_KEY) or request.scope.get("client")
    return str(peer[0]) if peer else None


@lru_cache(maxsize=8)
def _networks(cidrs: str | None) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(part, strict=False) for part in split_list(cidrs))


@lru_cache(maxsize=8)
def _admins(names: str | None) -> frozenset[str]:
    return frozenset(split_list(names))


def trusted(host: str | None, cidrs: str | None) -> bool:
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in network for network in _networks(cidrs))


class ProxyUserRefused(Exception):
    """The header came from the proxy's networks but names no usable user."""


def proxy_user(request: Request, settings: Settings) -> Principal | None:
    """The user the proxy vouches for, or None: no header configured or sent, or sent from
    an address outside DEVICEDECK_PROXY_TRUSTED_CIDRS (then it is ignored)."""
    if not settings.proxy_user_header:
        return None
    user = request.headers.get(settings.proxy_user_header)
    if user is None or not trusted(peer_host(request), settings.proxy_trusted_cidrs):
        return None
    user = user.strip()
    if not user or len(user) > MAX_USER_LENGTH or not user.isprintable():
        raise ProxyUserRefused(
            f"the {settings.proxy_user_header} header must name a user in 1 to "
            f"{MAX_USER_LENGTH} printable characters"
        )
    admin = user in _admins(settings.proxy_admins)
    return Principal(name=user, scopes=frozenset({"admin" if admin else "read"}), proxy_user=True)


def ignored_header(request: Request, settings: Settings) -> str | None:
    """Why a proxy user header the request carries was not believed, for the 401's message."""
    header = settings.proxy_user_header
    if not header or header not in request.headers:
        return None
    return (
        f"the {header} header is believed only from DEVICEDECK_PROXY_TRUSTED_CIDRS, and this "
        f"request came from {peer_host(request) or 'an unknown address'}"
    )
