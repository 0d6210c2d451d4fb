"""GET /nodes (table) and GET /nodes/{name} (devices as tiles by resource and NUMA node)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from devicedeck.inventory.dra.devices import dra_devices_of_node
from devicedeck.inventory.dra.overview import group_by_pool
from devicedeck.inventory.errors import NotFound
from devicedeck.inventory.fields import RESOURCE_MAX
from devicedeck.inventory.read.history import EventFilters, list_events
from devicedeck.inventory.read.node_status import DEVICE_PLUGIN
from devicedeck.inventory.read.overview import (
    node_device_groups,
    pods_holding_devices_of,
    resource_names,
)
from devicedeck.inventory.read.queries import NodeFilters, get_node, list_nodes
from devicedeck.ui.access import Viewer
from devicedeck.ui.actions import node_commands
from devicedeck.ui.forms import Form
from devicedeck.ui.lists import list_page
from devicedeck.ui.render import View, render_error, respond
from devicedeck.web.db_sessions import QueryClock, ReadSession
from devicedeck.web.state import service_state

router = APIRouter(include_in_schema=False)

SORTS = {"name": "name", "-name": "-name", "last_seen": "last_seen", "-last_seen": "-last_seen"}
STALE_CHOICES: dict[str, bool | None] = {"": None, "yes": True, "no": False}
NODE_EVENTS = 12


@router.get("/nodes", response_class=HTMLResponse)
def nodes(request: Request, viewer: Viewer, session: ReadSession, clock: QueryClock) -> Response:
    form = Form(request.query_params)
    q = form.text("q")
    stale = form.choice("stale", STALE_CHOICES)
    resource = form.text("resource", RESOURCE_MAX)
    sort = form.choice("sort", SORTS | {"": "name"})
    filters = NodeFilters(q=q, stale=stale, resource=resource)
    view = list_page(
        form,
        lambda cursor, limit: list_nodes(
            session, filters, clock, sort=sort, cursor=cursor, limit=limit
        ),
        filters=("q", "stale", "resource"),
        kept=("sort",),
        template="nodes.html",
        path="/nodes",
        title="Nodes",
        region="node-results",
        resources=resource_names(session),
        sort=sort,
    )
    return respond(request, viewer, view)


@router.get("/nodes/{name}", response_class=HTMLResponse)
def node(
    name: str, request: Request, viewer: Viewer, session: ReadSession, clock: QueryClock
) -> Response:
    try:
        detail = get_node(session, name, clock)
    except NotFound:
        return render_error(
            request,
            404,
            "No such node",
            f"Devicedeck has never heard from a node named “{name}”.",
            principal=viewer,
            back="/nodes",
        )
    groups = node_device_groups(session, name, clock, detail["resources"])
    context: dict[str, Any] = {
        "node": detail,
        "groups": groups,
        "holders": pods_holding_devices_of(session, name),
        "commands": node_commands(name),
        # The same rows as the API's: one rule tells plugin-backed from hand-advertised.
        "manual": detail["manual_extended_resources"],
        "kube": {
            row["resource"]: row
            for row in detail["extended_resources"]
            if row["source"] == DEVICE_PLUGIN
        },
        "events": list_events(session, EventFilters(node=name), limit=NODE_EVENTS).items,
        "dra_pools": group_by_pool(dra_devices_of_node(session, name)),
        # Forms that change node status only where there is a cluster to send them to.
        "can_administer": viewer.has("admin") and service_state(request.app).kube_api is not None,
    }
    return respond(
        request,
        viewer,
        View(
            "node.html",
            context,
            title=name,
            nav="nodes",
            regions=("node-summary", "node-devices", "node-dra", "node-side", "node-events"),
        ),
    )
