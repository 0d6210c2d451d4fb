"""GET /pods: namespaces, their pods, the pods' containers and the devices they hold."""

from __future__ import annotations

from itertools import groupby
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from app.inventory.pods import PodFilters, list_pods
from app.ui.access import Viewer
from app.ui.forms import Form
from app.ui.lists import list_view, run_list_query
from app.ui.render import respond
from app.web.sessions import QueryClock, ReadSession

router = APIRouter(include_in_schema=False)


@router.get("/pods", response_class=HTMLResponse)
def pods(request: Request, viewer: Viewer, session: ReadSession, clock: QueryClock) -> Response:
    form = Form(request.query_params)
    filters = PodFilters(
        namespace=form.text("namespace", 63), node=form.text("node"), q=form.text("q")
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
