"""GET /: totals per resource, nodes that need a look, trends, and the latest events."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session

from devicedeck.inventory.read.charts import DEFAULT_WINDOW, WINDOWS, ending_at, resource_history
from devicedeck.inventory.read.freshness import Freshness
from devicedeck.inventory.read.history import EventFilters, latest_event_id, list_events
from devicedeck.inventory.read.overview import oldest_device_time, overview_picture
from devicedeck.ui.access import Viewer
from devicedeck.ui.cache import PageCache
from devicedeck.ui.forms import Form
from devicedeck.ui.render import View, region_requested, respond
from devicedeck.ui.svg import resource_chart
from devicedeck.web.db_sessions import QueryClock, ReadSession

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
    # One picture for every region: regions replaced on their own (live, or the charts after
    # the page) then show one moment too.
    moment = (latest_event_id(session), int(clock.now.timestamp() // SUMMARY_TTL))
    picture = cache.get_or_compute(("picture", *moment), lambda: overview_picture(session, clock))
    context: dict[str, Any] = {
        "summary": picture["summary"],
        "problems": picture["problems"],
        "events": list_events(session, EventFilters(), limit=LATEST_EVENTS).items,
        "window": window,
        "default_window": default_window,
        "windows": list(WINDOWS),
        # Charts replay a day of events: the page comes first, the charts a moment later.
        "charts": _charts(request, session, clock, window, picture)
        if region_requested(request, "overview-trends")
        else None,
        "form_problems": form.problem_dicts(),
    }
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
    request: Request, session: Session, clock: Freshness, window: str, picture: dict[str, Any]
) -> list[dict[str, Any]]:
    """Charts per resource. The history is rebuilt at most once a minute per window (it walks
    every event in the window; a minute is nothing at its scale, a point every 15 minutes over
    a day); its last point, "now", is the picture's, the same counts as the table."""
    cache: PageCache = request.app.state.ui_cache
    history = cache.get_or_compute(
        ("history", window, int(clock.now.timestamp() // CHART_TTL)),
        lambda: resource_history(session, clock, WINDOWS[window]),
    )
    now = ending_at(history, picture["at"], picture["summary"]["resources"])
    return [
        {"resource": name, **resource_chart(now["times"], series)}
        for name, series in now["resources"].items()
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
