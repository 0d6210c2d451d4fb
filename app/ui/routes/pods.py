"""GET /pods: namespaces, their pods, the pods' containers and the devices they hold."""

from __future__ import annotations

from itertools import groupby
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from app.api.deps import QueryClock, ReadSession
from app.inventory.errors import InvalidInput
from app.inventory.pods import PodFilters, list_pods
from app.ui.access import Viewer
from app.ui.forms import Form, problems_of
from app.ui.render import View, respond
from app.ui.templating import query_url

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
    problems = form.problem_dicts()
    namespaces: list[dict[str, Any]] = []
    page = None
    if form.ok:
        try:
            page = list_pods(session, filters, clock, cursor=cursor, limit=limit)
        except InvalidInput as e:
            problems = problems_of(e)
        else:
            namespaces = [
                {"name": name, "pods": list(members)}
                for name, members in groupby(page.items, key=lambda pod: pod["namespace"])
            ]
    context: dict[str, Any] = {
        "page": page,
        "namespaces": namespaces,
        "state": state,
        "problems": problems,
        "cursor": cursor,
    }
    return respond(
        request,
        viewer,
        View(
            "pods.html",
            context,
            title="Pods",
            nav="pods",
            regions=("pod-results",),
            canonical=query_url("/pods", state, cursor=cursor),
            status=422 if problems else 200,
        ),
    )
