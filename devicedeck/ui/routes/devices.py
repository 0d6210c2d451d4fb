"""GET /devices (filterable, sortable, paged table) and GET /devices/{id} (history)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from devicedeck.inventory.errors import NotFound
from devicedeck.inventory.fields import HEALTH_VALUES, NAMESPACE_MAX, RESOURCE_MAX
from devicedeck.inventory.read.history import EventFilters, list_events
from devicedeck.inventory.read.overview import node_names, resource_names
from devicedeck.inventory.read.queries import DeviceFilters, get_device, list_devices
from devicedeck.inventory.read.reliability import (
    DEFAULT_WINDOW,
    choose_window,
    device_figures,
    recent_failures,
)
from devicedeck.inventory.watchlist import NOTE_MAX, mark_of
from devicedeck.ui.access import Viewer
from devicedeck.ui.actions import device_commands, device_link
from devicedeck.ui.forms import Form
from devicedeck.ui.lists import export_url, list_page
from devicedeck.ui.render import View, render_error, respond
from devicedeck.ui.svg import timeline
from devicedeck.web.db_sessions import QueryClock, ReadSession

router = APIRouter(include_in_schema=False)

SORT_KEYS = ("node", "resource", "device_id", "health", "attention", "health_since", "holder")
SORTS = {key: key for key in SORT_KEYS} | {f"-{key}": f"-{key}" for key in SORT_KEYS}
HEALTH_CHOICES = {"": None} | {value: value for value in HEALTH_VALUES}
ALLOCATED_CHOICES: dict[str, bool | None] = {"": None, "yes": True, "no": False}
STATE_CHOICES = {
    "": "present",
    "removed": "removed",
    "unhealthy_or_removed": "unhealthy_or_removed",
    "any": "any",
}
FILTERS = ("node", "resource", "health", "allocated", "namespace", "pod", "q", "state")
DEVICE_EVENTS = 30


@router.get("/devices", response_class=HTMLResponse)
def devices(request: Request, viewer: Viewer, session: ReadSession, clock: QueryClock) -> Response:
    form = Form(request.query_params)
    nodes = node_names(session)
    node = form.text("node")
    # A node's whole name picks that node; anything else is the start of names ("gpu").
    exact = node in nodes
    filters = DeviceFilters(
        node=node if exact else None,
        node_prefix=None if exact else node,
        resource=form.text("resource", RESOURCE_MAX),
        health=form.choice("health", HEALTH_CHOICES),
        allocated=form.choice("allocated", ALLOCATED_CHOICES),
        namespace=form.text("namespace", NAMESPACE_MAX),
        pod=form.text("pod"),
        q=form.text("q"),
        state=form.choice("state", STATE_CHOICES),
    )
    sort = form.choice("sort", SORTS | {"": "node"})
    view = list_page(
        form,
        lambda cursor, limit: list_devices(
            session, filters, clock, sort=sort, cursor=cursor, limit=limit
        ),
        filters=FILTERS,
        kept=("sort",),
        template="devices.html",
        path="/devices",
        title="Devices",
        region="device-results",
        resources=resource_names(session),
        nodes=nodes,
        sort=sort,
        export=export_url("/api/v1/devices", filters, sort=sort),
    )
    return respond(request, viewer, view)


@router.get("/devices/{device_id}", response_class=HTMLResponse)
def device(
    device_id: str, request: Request, viewer: Viewer, session: ReadSession, clock: QueryClock
) -> Response:
    try:
        if not device_id.isdigit() or len(device_id) > 18:
            raise NotFound(device_id)
        detail = get_device(session, int(device_id), clock)
    except NotFound:
        return render_error(
            request,
            404,
            "No such device",
            "There is no device with that number. It may have come from an old link.",
            principal=viewer,
            back="/devices",
        )
    events = list_events(session, EventFilters(device=detail["id"]), limit=DEVICE_EVENTS).items
    pk = detail["id"]
    context: dict[str, Any] = {
        "device": detail,
        "reliability": device_figures(session, pk, choose_window(clock.now, DEFAULT_WINDOW)),
        "failures_24h": recent_failures(session, clock.now, device_pk=pk).get(pk, 0),
        "commands": device_commands(detail),
        "link_out": device_link(request.app.state.settings.device_link_template, detail),
        "events": events,
        "mark": mark_of(session, detail["id"]),
        "can_mark": viewer.has("admin"),
        "note_max": NOTE_MAX,
        "timeline": timeline(
            detail["first_seen"], clock.now, detail["health_history"], detail["allocation_history"]
        ),
    }
    return respond(
        request,
        viewer,
        View(
            "device.html",
            context,
            title=f"{detail['device_id']} on {detail['node']}",
            nav="devices",
            regions=("device-summary", "device-reliability", "device-history"),
        ),
    )
