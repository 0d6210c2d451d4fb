"""The operator dashboard: server-rendered pages with htmx for partial and live updates."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles


def install_ui(app: FastAPI) -> None:
    """Pages, the event stream, static files, security headers and the live-update task."""
    from devicedeck.ui.access import install_access_handlers
    from devicedeck.ui.cache import PageCache
    from devicedeck.ui.error_page import PageErrors, page_sections
    from devicedeck.ui.live import start_live_updates
    from devicedeck.ui.routes import (
        devices,
        dra,
        events,
        extended,
        login,
        missing,
        nodes,
        overview,
        pods,
        reliability,
        watchlist,
    )
    from devicedeck.ui.security import SecurityHeadersMiddleware
    from devicedeck.ui.stream import router as stream_router
    from devicedeck.ui.stream_limits import LiveStreams, start_stream_checks
    from devicedeck.ui.templating import STATIC, build_environment

    app.state.ui_templates = build_environment()
    app.state.ui_cache = PageCache()
    app.state.live = None
    app.state.live_streams = LiveStreams(app.state.settings.max_live_streams)
    pages = [
        m.router
        for m in (
            overview,
            nodes,
            devices,
            dra,
            pods,
            reliability,
            events,
            watchlist,
            login,
            extended,
        )
    ]
    for page_router in pages:
        app.include_router(page_router)
    app.include_router(stream_router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    # Last: it answers every path nothing above matched.
    app.include_router(missing.router)
    app.add_middleware(SecurityHeadersMiddleware)
    install_access_handlers(app)
    app.state.error_page = PageErrors(page_sections(pages))
    app.state.background_starters.append(start_live_updates)
    app.state.background_starters.append(start_stream_checks)
