"""GET /events: the change log, filterable, newest first, live."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from devicedeck.inventory.events import EVENT_KINDS
from devicedeck.inventory.fields import NAMESPACE_MAX, RESOURCE_MAX
from devicedeck.inventory.read.history import EventFilters, list_events
from devicedeck.ui.access import Viewer
from devicedeck.ui.forms import Form
from devicedeck.ui.lists import export_url, list_page
from devicedeck.ui.render import respond
from devicedeck.web.db_sessions import QueryClock, ReadSession

router = APIRouter(include_in_schema=False)

KIND_CHOICES = {"": None} | {kind: kind for kind in EVENT_KINDS}
FILTERS = ("kind", "node", "resource", "namespace", "pod", "device", "device_id", "since", "until")


@router.get("/events", response_class=HTMLResponse)
def events(request: Request, viewer: Viewer, session: ReadSession, clock: QueryClock) -> Response:
    form = Form(request.query_params)
    filters = EventFilters(
        kind=form.choice("kind", KIND_CHOICES),
        node=form.text("node"),
        resource=form.text("resource", RESOURCE_MAX),
        namespace=form.text("namespace", NAMESPACE_MAX),
        pod=form.text("pod"),
        device=form.integer("device", minimum=1),
        device_id=form.text("device_id"),
        since=form.moment("since", clock.now),
        until=form.moment("until", clock.now),
    )
    view = list_page(
        form,
        lambda cursor, limit: list_events(session, filters, cursor=cursor, limit=limit),
        filters=FILTERS,
        template="events.html",
        path="/events",
        title="Events",
        region="event-results",
        kinds=EVENT_KINDS,
        export=export_url("/api/v1/events", filters),
    )
    return respond(request, viewer, view)
