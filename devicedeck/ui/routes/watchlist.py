"""GET /watchlist (devices marked for return) and POST /devices/{id}/watchlist (mark or
unmark from the device's page, admin scope). The same domain calls as the API, so the page
records who marked a device exactly as the API does."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from devicedeck.clock import utcnow
from devicedeck.db import write_session
from devicedeck.inventory.errors import DomainError, InvalidInput, Problem
from devicedeck.inventory.watchlist import list_watchlist, mark_device, unmark_device
from devicedeck.ui.access import Viewer
from devicedeck.ui.forms import Form
from devicedeck.ui.lists import list_page
from devicedeck.ui.render import render_error, respond
from devicedeck.ui.routes.login import read_form, refuse_cross_site
from devicedeck.ui.templating import query_url
from devicedeck.web.db_sessions import ReadSession
from devicedeck.web.errors import status_of
from devicedeck.web.state import service_state

router = APIRouter(include_in_schema=False)

ACTIONS = ("mark", "unmark")


@router.get("/watchlist", response_class=HTMLResponse)
def watchlist(request: Request, viewer: Viewer, session: ReadSession) -> Response:
    form = Form(request.query_params)
    view = list_page(
        form,
        lambda cursor, limit: list_watchlist(session, cursor=cursor, limit=limit),
        filters=(),
        template="watchlist.html",
        path="/watchlist",
        title="Watch list",
        region="watchlist-results",
        export=query_url("/api/v1/watchlist", {}, format="csv"),
    )
    return respond(request, viewer, view)


@router.post("/devices/{device_id}/watchlist", response_class=HTMLResponse)
async def change_mark(device_id: str, request: Request, viewer: Viewer) -> Response:
    form = await read_form(request)
    refused = refuse_cross_site(request, form)
    if refused is not None:
        return refused
    back = f"/devices/{device_id}"
    if not viewer.has("admin"):
        return render_error(
            request,
            403,
            "Admin scope needed",
            f"{'The user' if viewer.proxy_user else 'The token'} “{viewer.name}” lacks the "
            "admin scope, so the watch list was not changed.",
            principal=viewer,
            back=back,
        )
    action = form.get("action", "")
    try:
        if action not in ACTIONS:
            raise InvalidInput(
                "unknown action", [Problem("action", "enum", "must be mark or unmark")]
            )
        if not device_id.isdigit() or len(device_id) > 18:
            raise InvalidInput(
                "no such device", [Problem("device", "integer", "must be a device's number")]
            )
        await run_in_threadpool(
            _change, request, int(device_id), action, form.get("note"), viewer.name
        )
    except DomainError as e:
        return render_error(
            request,
            status_of(e),
            "Not changed",
            e.message,
            principal=viewer,
            problems=[p.as_dict() for p in e.problems],
            back=back,
        )
    return RedirectResponse(back, status_code=303)


def _change(request: Request, device_pk: int, action: str, note: str | None, actor: str) -> None:
    with write_session(service_state(request.app).session_factory) as session:
        if action == "mark":
            mark_device(session, device_pk, actor=actor, now=utcnow(), note=note)
        else:
            unmark_device(session, device_pk)
