"""GET /pods (namespaces, their pods, the pods' containers and the devices they hold) and
GET /pods/NAMESPACE/NAME (one pod, running or finished, and its devices' health meanwhile)."""

from __future__ import annotations

from itertools import groupby
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from devicedeck.inventory.dra.pods import claims_only_pod, pod_dra_by_name
from devicedeck.inventory.errors import NotFound
from devicedeck.inventory.fields import NAMESPACE_MAX
from devicedeck.inventory.read.history import EventFilters, list_events
from devicedeck.inventory.read.pod_history import get_pod_history
from devicedeck.inventory.read.pods import PodFilters, list_pods
from devicedeck.ui.access import Viewer
from devicedeck.ui.forms import Form
from devicedeck.ui.lists import list_view, run_list_query
from devicedeck.ui.render import View, render_error, respond
from devicedeck.ui.svg import pod_timeline
from devicedeck.web.db_sessions import QueryClock, ReadSession

router = APIRouter(include_in_schema=False)
POD_EVENTS = 50


@router.get("/pods", response_class=HTMLResponse)
def pods(request: Request, viewer: Viewer, session: ReadSession, clock: QueryClock) -> Response:
    form = Form(request.query_params)
    filters = PodFilters(
        namespace=form.text("namespace", NAMESPACE_MAX), node=form.text("node"), q=form.text("q")
    )
    limit = form.page_size()
    cursor = form.cursor()
    state = form.state("namespace", "node", "q", "limit")
    page, problems = run_list_query(
        form, lambda: list_pods(session, filters, clock, cursor=cursor, limit=limit)
    )
    namespaces: list[dict[str, Any]] = [
        {"name": name, "pods": list(members)}
        for name, members in groupby(page.items if page else [], key=lambda p: p["namespace"])
    ]
    view = list_view(
        template="pods.html",
        path="/pods",
        title="Pods",
        region="pod-results",
        page=page,
        problems=problems,
        state=state,
        cursor=cursor,
        namespaces=namespaces,
    )
    return respond(request, viewer, view)


@router.get("/pods/{namespace}/{name}", response_class=HTMLResponse)
def pod(
    namespace: str,
    name: str,
    request: Request,
    viewer: Viewer,
    session: ReadSession,
    clock: QueryClock,
) -> Response:
    dra = pod_dra_by_name(session, namespace, name)
    try:
        detail = get_pod_history(session, namespace, name, clock)
    except NotFound:
        if dra is not None:
            detail = claims_only_pod(namespace, name, dra)
        else:
            return render_error(
                request,
                404,
                "No such pod",
                f"No pod {namespace}/{name} has held a device. Devicedeck knows only pods that "
                "held devices.",
                principal=viewer,
                back="/pods",
            )
    events = list_events(
        session, EventFilters(namespace=namespace, pod=name), limit=POD_EVENTS
    ).items
    context: dict[str, Any] = {
        "pod": detail,
        "events": events,
        "timeline": pod_timeline(detail, clock.now),
        "dra": dra,
    }
    return respond(
        request,
        viewer,
        View(
            "pod.html",
            context,
            title=f"{namespace}/{name}",
            nav="pods",
            regions=("pod-summary", "pod-holds", "pod-dra"),
        ),
    )
