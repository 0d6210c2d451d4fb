"""/api/v1/tokens: API tokens, for holders of the admin scope."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from pydantic import BaseModel, Field

from devicedeck.api.envelope import ListEnvelope, envelope
from devicedeck.api.examples import example
from devicedeck.api.models import NOT_JSON, ErrorOut
from devicedeck.api.vocabulary import Scope, ScopeChoice
from devicedeck.clock import utcnow
from devicedeck.credentials.tokens import create_token, list_tokens, revoke_token
from devicedeck.db import write_session
from devicedeck.inventory.models import ApiToken
from devicedeck.inventory.read.pagination import Page
from devicedeck.web.caller_first import CallerFirstRoute
from devicedeck.web.db_sessions import ReadSession, SessionFactory
from devicedeck.web.principal import Admin, token_cache

router = APIRouter(
    prefix="/api/v1/tokens",
    route_class=CallerFirstRoute,
    tags=["tokens"],
    responses={
        401: {"model": ErrorOut, "description": "missing, unknown or revoked token"},
        403: {"model": ErrorOut, "description": "the token lacks the admin scope"},
        422: {"model": ErrorOut, "description": "a parameter breaks a rule"},
    },
)


TOKEN_EXAMPLE = {
    "name": "agent-gpu-node-1",
    "scopes": ["ingest"],
    "node": "gpu-node-1",
    "all_nodes": False,
    "created_at": "2026-12-01T08:30:00Z",
    "last_used_at": "2026-12-02T12:00:00Z",
    "revoked_at": None,
}


class TokenOut(BaseModel):
    model_config = example(TOKEN_EXAMPLE)

    name: str
    scopes: list[Scope]
    node: str | None = Field(description="the one node an ingest token may write")
    all_nodes: bool = Field(description="whether an ingest token may write every node")
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class NewToken(BaseModel):
    name: str = Field(min_length=1, max_length=100)
    scopes: list[ScopeChoice] = Field(min_length=1, max_length=3)
    node: str | None = Field(
        default=None, description="for an ingest token: the node whose snapshots it may send"
    )
    all_nodes: bool = Field(
        default=False, description="for an ingest token: may send any node's snapshots"
    )


class CreatedToken(TokenOut):
    model_config = example(
        {**TOKEN_EXAMPLE, "last_used_at": None, "token": "ddk_3q9V0x2LrT8mYk4sW1bN7cJd5hFgA6eP"}
    )

    token: str = Field(description="shown once; only its hash is kept")


def _token_out(token: ApiToken) -> dict[str, Any]:
    return {
        "name": token.name,
        "scopes": list(token.scopes),
        "node": token.node,
        "all_nodes": token.all_nodes,
        "created_at": token.created_at,
        "last_used_at": token.last_used_at,
        "revoked_at": token.revoked_at,
    }


@router.get(
    "",
    operation_id="listTokens",
    response_model=ListEnvelope[TokenOut],
    summary="All tokens (never their secrets)",
)
def tokens(request: Request, session: ReadSession, _: Admin) -> dict[str, Any]:
    # Few enough to answer on one page, in the same envelope as every other list.
    items = [_token_out(t) for t in list_tokens(session)]
    return envelope(request, Page(items=items, next_cursor=None, count=len(items)))


@router.post(
    "",
    operation_id="createToken",
    response_model=CreatedToken,
    status_code=201,
    responses={
        422: {"model": ErrorOut, "description": "bad name, scope or node binding"},
        **NOT_JSON,
    },
    summary="Create a token; the response is the only time its secret is shown",
)
def create(
    response: Response, factory: SessionFactory, _: Admin, body: Annotated[NewToken, Body()]
) -> dict[str, Any]:
    # The answer carries a secret: no cache on the way may keep it.
    response.headers["Cache-Control"] = "no-store"
    with write_session(factory) as session:
        token, plaintext = create_token(
            session, body.name, body.scopes, utcnow(), node=body.node, all_nodes=body.all_nodes
        )
        return {**_token_out(token), "token": plaintext}


@router.delete(
    "/{name}",
    operation_id="revokeToken",
    response_model=TokenOut,
    responses={404: {"model": ErrorOut, "description": "no token of that name"}},
    summary="Revoke a token",
)
def revoke(request: Request, name: str, factory: SessionFactory, _: Admin) -> dict[str, Any]:
    with write_session(factory) as session:
        revoked = _token_out(revoke_token(session, name, utcnow()))
    token_cache(request).forget(name)
    return revoked
