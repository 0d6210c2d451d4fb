"""/api/v1/watchlist: devices marked for return. Anyone with the read scope reads it; marking
and unmarking take the admin scope, and record who did it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from devicedeck.api.envelope import ListEnvelope
from devicedeck.api.examples import AT, example
from devicedeck.api.export import page_or_csv
from devicedeck.api.inventory import CSV, FormatParam
from devicedeck.api.models import NOT_JSON, ErrorOut
from devicedeck.api.params import Cursor, Limit
from devicedeck.clock import utcnow
from devicedeck.db import write_session
from devicedeck.inventory.read.pagination import DEFAULT_LIMIT, MAX_KEY, Page
from devicedeck.inventory.watchlist import (
    NOTE_MAX,
    get_watched_device,
    list_watchlist,
    mark_device,
    unmark_device,
)
from devicedeck.web.caller_first import CallerFirstRoute
from devicedeck.web.db_sessions import ReadSession, SessionFactory
from devicedeck.web.principal import Admin, Reader

router = APIRouter(
    prefix="/api/v1/watchlist",
    tags=["watch list"],
    route_class=CallerFirstRoute,
    responses={
        401: {"model": ErrorOut, "description": "missing, unknown or revoked token"},
        403: {"model": ErrorOut, "description": "the token lacks the scope"},
        422: {"model": ErrorOut, "description": "a parameter or the note breaks a rule"},
    },
)
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "no such device, or (GET) it is not marked"}
}

WATCHLIST_COLUMNS = (
    "id", "node", "resource", "device_id", "health", "state", "unhealthy_transitions",
    "marked_by", "marked_at", "note",
)  # fmt: skip

DevicePk = Annotated[
    int, Path(alias="id", ge=1, le=MAX_KEY, description="the device's `id` in this API")
]


class WatchedDeviceOut(BaseModel):
    model_config = example(
        {
            "id": 17,
            "node": "gpu-node-1",
            "resource": "nvidia.com/gpu",
            "device_id": "GPU-6bf47ca9-0000-4000-8000-000000000003",
            "health": "Unhealthy",
            "state": "present",
            "unhealthy_transitions": 6,
            "marked_by": "oncall",
            "marked_at": AT,
            "note": "flaps several times a day; RMA ticket 4411",
        }
    )

    id: int
    node: str
    resource: str
    device_id: str
    health: str = Field(description="as last reported: Healthy, Unhealthy or Unknown")
    state: str = Field(description="present or removed")
    unhealthy_transitions: int = Field(
        description="times the device turned Unhealthy from another health, since first seen"
    )
    marked_by: str = Field(description="the token or user that marked it")
    marked_at: str
    note: str | None


class WatchMarkIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str | None = Field(
        default=None, max_length=NOTE_MAX, description="why it goes back: a ticket, a symptom"
    )


@router.get(
    "",
    operation_id="listWatchlist",
    response_model=ListEnvelope[WatchedDeviceOut],
    responses=CSV,
    summary="Devices marked for return, newest mark first",
)
def watchlist(
    request: Request,
    session: ReadSession,
    factory: SessionFactory,
    _: Reader,
    cursor: Cursor = None,
    limit: Limit = DEFAULT_LIMIT,
    format: FormatParam = "json",
) -> dict[str, Any] | Response:
    def fetch(session: Session, after: str | None, size: int) -> Page[dict[str, Any]]:
        return list_watchlist(session, cursor=after, limit=size)

    return page_or_csv(
        request,
        session,
        factory,
        fetch,
        format=format,
        cursor=cursor,
        limit=limit,
        columns=WATCHLIST_COLUMNS,
        filename="watchlist.csv",
    )


@router.get(
    "/{id}",
    operation_id="getWatchlistEntry",
    response_model=WatchedDeviceOut,
    responses=NOT_FOUND,
    summary="One device's mark",
)
def entry(pk: DevicePk, session: ReadSession, _: Reader) -> dict[str, Any]:
    return get_watched_device(session, pk)


@router.put(
    "/{id}",
    operation_id="markDevice",
    response_model=WatchedDeviceOut,
    responses={**NOT_FOUND, **NOT_JSON},
    summary="Mark a device for return, or replace its mark (who, when, note)",
)
def mark(
    pk: DevicePk,
    principal: Admin,
    factory: SessionFactory,
    body: Annotated[WatchMarkIn | None, Body()] = None,
) -> dict[str, Any]:
    note = body.note if body is not None else None
    with write_session(factory) as session:
        return mark_device(session, pk, actor=principal.name, now=utcnow(), note=note)


@router.delete(
    "/{id}",
    operation_id="unmarkDevice",
    status_code=204,
    response_class=Response,
    responses=NOT_FOUND,
    summary="Take a device off the watch list (nothing to do when it is not on it)",
)
def unmark(pk: DevicePk, _: Admin, factory: SessionFactory) -> Response:
    with write_session(factory) as session:
        unmark_device(session, pk)
    return Response(status_code=204)
