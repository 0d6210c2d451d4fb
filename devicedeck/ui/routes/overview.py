"""GET /: totals per resource, nodes that need a look, trends, and the latest events."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session

from devicedeck.inventory.charts import DEFAULT_WINDOW, WINDOWS, resource_history
from devicedeck.inventory.freshness import Freshness
from devicedeck.inventory.history import EventFilters, latest_event_id, list_events
from devicedeck.inventory.overview import (
    cluster_summary,
    nodes_needing_attention,
    oldest_device_time,
)
from devicedeck.ui.access import Viewer
from devicedeck.ui.cache import PageCache
from devicedeck.ui.forms import Form
from devicedeck.ui.render import View, region_requested, respond
from devicedeck.ui.svg import resource_chart
from devicedeck.web.sessions import QueryClock, ReadSession

router = APIRouter(include_in_schema=False)

REGIONS = (
    "overview-kpis",
    "overview-resources",
    "overview-problems",
    "overview-trends",
    "overview-events",
)
LATEST_EVENTS = 12
CHART_TTL = 60
SUMMARY_TTL = 2


@router.get("/", response_class=HTMLResponse)
def overview(request: Request, viewer: Viewer, session: ReadSession, clock: QueryClock) -> Response:
    form = Form(request.query_params)
    default_window = fitting_window(session, clock)
    window = form.choice("window", {name: name for name in WINDOWS} | {"": default_window})
    cache: PageCache = request.app.state.ui_cache
    fresh = (latest_event_id(session), int(clock.now.timestamp() // SUMMARY_TTL))
    context: dict[str, Any] = {
        "summary": cache.get_or_compute(
            ("summary", *fresh), lambda: cluster_summary(session, clock)
        ),
        "problems": cache.get_or_compute(
            ("problems", *fresh), lambda: nodes_needing_attention(session, clock)
        ),
        "events": list_events(session, EventFilters(), limit=LATEST_EVENTS).items,
        "window": window,
        "default_window": default_window,
        "windows": list(WINDOWS),
        # Charts replay a day of events: the page comes first, the charts a moment later.
        "charts": _charts(request, session, clock, window)
        if region_requested(request, "overview-trends")
        else None,
        "form_problems": form.problem_dicts(),
    }
    if context["charts"]:
        context["charts"] = with_now(context["charts"], context["summary"]["resources"])
    canonical = "/" if window == default_window else f"/?window={window}"
    return respond(
        request,
        viewer,
        View(
            "overview.html",
            context,
            title="Overview",
            nav="overview",
            regions=REGIONS,
            canonical=canonical,
            status=422 if form.problems else 200,
        ),
    )


def _charts(
    request: Request, session: Session, clock: Freshness, window: str
) -> list[dict[str, Any]]:
    """Charts per resource, rebuilt at most once a minute per window: rebuilding walks every
    event in the window. A chart a minute old is still right at its scale (a point every 15
    minutes over a day)."""
    cache: PageCache = request.app.state.ui_cache

    def build() -> list[dict[str, Any]]:
        history = resource_history(session, clock, WINDOWS[window])
        return [
            {"resource": name, **resource_chart(history["times"], series)}
            for name, series in history["resources"].items()
        ]

    return cache.get_or_compute(("charts", window, int(clock.now.timestamp() // CHART_TTL)), build)


def with_now(charts: list[dict[str, Any]], resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each chart's "now" from the same counts as the resources table beside it: the charts
    are drawn at most once a minute, the table is read with the page."""
    counts = {r["resource"]: r for r in resources}
    return [
        {
            **chart,
            "now": {k: counts[chart["resource"]][k] for k in ("devices", "healthy", "allocated")},
        }
        if chart["resource"] in counts
        else {**chart, "now": chart["last"]}
        for chart in charts
    ]


def fitting_window(session: Session, clock: Freshness) -> str:
    """The shortest chart window that holds all the history there is, up to the usual day."""
    oldest = oldest_device_time(session)
    if oldest is None:
        return DEFAULT_WINDOW
    age = clock.now - oldest
    for name in ("1h", "6h"):
        if age <= WINDOWS[name]:
            return name
    return DEFAULT_WINDOW
