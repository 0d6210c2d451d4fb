"""GET /reliability: the devices that failed most in a window, and their nodes and resources."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from devicedeck.inventory.fields import NAMESPACE_MAX, RESOURCE_MAX
from devicedeck.inventory.read.overview import node_names, resource_names
from devicedeck.inventory.read.pagination import Page
from devicedeck.inventory.read.reliability import (
    DEFAULT_SORT,
    DEFAULT_WINDOW,
    DEVICE_SORTS,
    GROUP_SORTS,
    WINDOWS,
    Ranking,
    ReliabilityFilters,
    Window,
    choose_window,
)
from devicedeck.ui.access import Viewer
from devicedeck.ui.forms import Form
from devicedeck.ui.lists import export_url, list_page
from devicedeck.ui.render import respond
from devicedeck.web.db_sessions import QueryClock, ReadSession

router = APIRouter(include_in_schema=False)

CUSTOM = "custom"
WINDOW_CHOICES = {"": DEFAULT_WINDOW} | {name: name for name in WINDOWS} | {CUSTOM: CUSTOM}
SORTS = {key: key for key in DEVICE_SORTS} | {f"-{key}": f"-{key}" for key in DEVICE_SORTS}
FILTERS = ("window", "since", "until", "node", "resource", "namespace")
# Nodes and resources shown beside the devices, worst first.
GROUPS_SHOWN = 10


@router.get("/reliability", response_class=HTMLResponse)
def reliability(
    request: Request, viewer: Viewer, session: ReadSession, clock: QueryClock
) -> Response:
    form = Form(request.query_params)
    nodes = node_names(session)
    node = form.text("node")
    # A node's whole name picks that node; anything else is the start of names ("gpu").
    exact = node in nodes
    filters = ReliabilityFilters(
        node=node if exact else None,
        node_prefix=None if exact else node,
        resource=form.text("resource", RESOURCE_MAX),
        namespace=form.text("namespace", NAMESPACE_MAX),
    )
    window_name = form.choice("window", WINDOW_CHOICES)
    since = form.moment("since", clock.now)
    until = form.moment("until", clock.now)
    sort = form.choice("sort", SORTS | {"": DEFAULT_SORT})
    shown: dict[str, Any] = {}

    def query(cursor: str | None, limit: int) -> Page[dict[str, Any]]:
        window: Window = (
            choose_window(clock.now, None, since, until)
            if window_name == CUSTOM
            else choose_window(clock.now, window_name)
        )
        ranking = Ranking(session, filters, window)
        # The groups sort by the devices' figure where they have it, else by failures.
        group_sort = sort if sort.lstrip("-") in GROUP_SORTS else DEFAULT_SORT
        shown["window"] = window
        shown["by_node"] = ranking.groups("node", sort=group_sort, limit=GROUPS_SHOWN)
        shown["by_resource"] = ranking.groups("resource", sort=group_sort, limit=GROUPS_SHOWN)
        return ranking.devices(sort=sort, cursor=cursor, limit=limit)

    view = list_page(
        form,
        query,
        filters=FILTERS,
        kept=("sort",),
        template="reliability.html",
        path="/reliability",
        title="Reliability",
        region="reliability-results",
        resources=resource_names(session),
        nodes=nodes,
        sort=sort,
        windows=tuple(WINDOWS),
        custom=CUSTOM,
        default_window=DEFAULT_WINDOW,
        shown=shown,
    )
    window = shown.get("window")
    if window is not None:
        view.context["export"] = export_url(
            "/api/v1/reliability/devices",
            filters,
            sort=sort,
            since=window.since.isoformat(),
            until=window.until.isoformat(),
        )
    return respond(request, viewer, view)
