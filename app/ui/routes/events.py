"""GET /events: the change log, filterable, newest first, live."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from app.api.deps import ReadSession
from app.inventory.errors import InvalidInput
from app.inventory.events import EVENT_KINDS
from app.inventory.history import EventFilters, list_events
from app.ui.access import Viewer
from app.ui.forms import RESOURCE_MAX, Form, problems_of
from app.ui.render import View, respond
from app.ui.templating import query_url

router = APIRouter(include_in_schema=False)

KIND_CHOICES = {"": None} | {kind: kind for kind in EVENT_KINDS}
FILTERS = ("kind", "node", "resource", "namespace", "pod", "device")


@router.get("/events", response_class=HTMLResponse)
def events(request: Request, viewer: Viewer, session: ReadSession) -> Response:
    form = Form(request.query_params)
    filters = EventFilters(
        kind=form.choice("kind", KIND_CHOICES),
        node=form.text("node"),
        resource=form.text("resource", RESOURCE_MAX),
        namespace=form.text("namespace", 63),
        pod=form.text("pod"),
        device=form.integer("device", minimum=1),
    )
    limit = form.page_size()
    cursor = form.cursor()
    state = form.state(*FILTERS, "limit")
    problems = form.problem_dicts()
    page = None
    if form.ok:
        try:
            page = list_events(session, filters, cursor=cursor, limit=limit)
        except InvalidInput as e:
            problems = problems_of(e)
    context: dict[str, Any] = {
        "page": page,
        "state": state,
        "problems": problems,
        "kinds": EVENT_KINDS,
        "cursor": cursor,
        "filtered": any(state[name] for name in FILTERS),
    }
    return respond(
        request,
        viewer,
        View(
            "events.html",
            context,
            title="Events",
            nav="events",
            regions=("event-results",),
            canonical=query_url("/events", state, cursor=cursor),
            status=422 if problems else 200,
        ),
    )
