"""Who is calling: the bearer token (checked and cached) or the dashboard's session cookie
(checked on every request)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from devicedeck.clock import utcnow
from devicedeck.config import AuthMode, Settings
from devicedeck.credentials.dashboard_sessions import (
    SessionLimits,
    authenticate_session,
    record_session_use,
)
from devicedeck.credentials.tokens import (
    ANONYMOUS_READER,
    TOKEN_PREFIX,
    Principal,
    TokenCache,
    authenticate,
    record_token_use,
)
from devicedeck.db import write_session
from devicedeck.kube.service_accounts import (
    ReviewedAgent,
    ReviewRefused,
    ReviewUnavailable,
    ServiceAccountReviewer,
)
from devicedeck.web.caller_first import checked_before_body
from devicedeck.web.observe import PRINCIPAL_KEY
from devicedeck.web.proxy import ProxyUserRefused, ignored_header, proxy_user
from devicedeck.web.state import service_state

# The dashboard's cookie holds a session id (credentials/dashboard_sessions.py), never a token.
SESSION_COOKIE = "devicedeck_session"
# Earlier versions kept the API token itself in this cookie. It is never read; signing in or
# out deletes it from the browser.
LEGACY_TOKEN_COOKIE = "devicedeck_token"


def presented_token(request: Request) -> str | None:
    """The bearer token of the Authorization header, if there is one."""
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise HTTPException(
            401,
            "Authorization header must be 'Bearer <token>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return value.strip()


def session_limits(settings: Settings) -> SessionLimits:
    return SessionLimits(
        idle=timedelta(seconds=settings.session_idle_seconds),
        max_age=timedelta(seconds=settings.session_max_age_seconds),
    )


def _principal_from_session(request: Request, session_id: str) -> Principal | None:
    """The dashboard session checked against the database on every request (in a worker
    thread), never cached: a sign-out or a revocation on any process ends it at once."""
    state = service_state(request.app)
    now = utcnow()
    with state.session_factory() as session:
        found = authenticate_session(session, session_id, now, session_limits(state.settings))
    if found is None:
        return None
    principal = found.principal
    if found.touch and principal.session_id is not None and principal.token_id is not None:
        with write_session(state.session_factory) as session:
            record_session_use(session, principal.session_id, principal.token_id, now)
    return principal


def _principal_from_database(request: Request, token: str) -> Principal:
    """The token checked against the database (in a worker thread), then cached."""
    factory = service_state(request.app).session_factory
    now = utcnow()
    with factory() as session:
        found = authenticate(session, token, now)
    if found is None:
        raise HTTPException(
            401, "the token is unknown or revoked", headers={"WWW-Authenticate": "Bearer"}
        )
    if found.touch:
        with write_session(factory) as session:
            record_token_use(session, found.token_id, now)
    token_cache(request).put(token, found.principal)
    return found.principal


def _principal_from_review(reviewer: ServiceAccountReviewer, token: str) -> Principal:
    """A node agent's ServiceAccount token, checked by TokenReview (in a worker thread): it
    may send its own node's snapshots and nothing else."""
    try:
        agent: ReviewedAgent = reviewer.review(token)
    except ReviewRefused as e:
        raise HTTPException(
            e.status, e.message, headers={"WWW-Authenticate": "Bearer"} if e.status == 401 else None
        ) from e
    except ReviewUnavailable as e:
        # Nothing was applied; the agent sends the snapshot again.
        raise HTTPException(
            503, f"cannot check the token now: {e}", headers={"Retry-After": "5"}
        ) from e
    return Principal(name=agent.username, scopes=frozenset({"ingest"}), node=agent.node)


def token_cache(request: Request) -> TokenCache:
    return service_state(request.app).token_cache


async def current_principal(request: Request) -> Principal:
    """The caller, found once per request: the check before the body is read and the route's
    own dependency both ask."""
    known: Principal | None = getattr(request.state, "principal", None)
    if known is None:
        known = request.state.principal = await _identify(request)
        # For the access log (devicedeck/web/observe.py): the name only, never the token.
        request.scope.setdefault("state", {})[PRINCIPAL_KEY] = known.name
    return known


async def _identify(request: Request) -> Principal:
    token = presented_token(request)
    if token is None:
        return await _principal_without_token(request)
    # An agent posts every few seconds: a cache hit answers without a thread or a query.
    cached = token_cache(request).get(token)
    if cached is not None:
        return cached
    reviewer = service_state(request.app).service_account_reviewer
    if reviewer is not None and not token.startswith(TOKEN_PREFIX):
        return await run_in_threadpool(_principal_from_review, reviewer, token)
    return await run_in_threadpool(_principal_from_database, request, token)


async def _principal_without_token(request: Request) -> Principal:
    """A dashboard session, else a user an authenticating proxy vouches for, else nobody."""
    settings = service_state(request.app).settings
    auth_off = settings.auth is AuthMode.OFF
    session_id = request.cookies.get(SESSION_COOKIE)
    if session_id:
        principal = await run_in_threadpool(_principal_from_session, request, session_id)
        if principal is not None:
            return principal
    try:
        vouched = proxy_user(request, settings)
    except ProxyUserRefused as e:
        raise HTTPException(401, str(e), headers={"WWW-Authenticate": "Bearer"}) from e
    if vouched is not None:
        return vouched
    if auth_off:
        return ANONYMOUS_READER
    if session_id:
        raise HTTPException(
            401,
            "the dashboard session has ended (signed out, expired, or its token revoked): "
            "sign in again",
            headers={"WWW-Authenticate": "Bearer"},
        )
    ignored = ignored_header(request, settings)
    message = "a bearer token is required" + (f" ({ignored})" if ignored else "")
    raise HTTPException(401, message, headers={"WWW-Authenticate": "Bearer"})


@dataclass(frozen=True)
class ScopeCheck:
    """The dependency a route takes to require a scope; the OpenAPI schema reads `scope` from
    it, so the documented security is the one enforced."""

    scope: str

    def __post_init__(self) -> None:
        # Routes that take a body run it before they read the body (devicedeck/web/caller_first.py).
        checked_before_body(self)

    # One dependency, not one on top of current_principal: FastAPI's dependency solving costs
    # a visible share of an agent's most frequent request, an unchanged snapshot.
    async def __call__(self, request: Request) -> Principal:
        scope = self.scope
        principal = await current_principal(request)
        if principal is ANONYMOUS_READER and not principal.has(scope):
            raise HTTPException(
                401,
                f"a bearer token with the {scope!r} scope is required: with authentication "
                "off, visitors without a token may only read",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not principal.has(scope):
            raise HTTPException(403, f"this token lacks the {scope!r} scope")
        return principal


Reader = Annotated[Principal, Depends(ScopeCheck("read"))]
Ingester = Annotated[Principal, Depends(ScopeCheck("ingest"))]
Admin = Annotated[Principal, Depends(ScopeCheck("admin"))]
