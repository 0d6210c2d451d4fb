"""The operator dashboard: server-rendered pages with htmx for partial and live updates."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles


def install_ui(app: FastAPI) -> None:
    """Pages, the event stream, static files, security headers and the live-update task."""
    from app.ui.access import install_access_handlers
    from app.ui.cache import PageCache
    from app.ui.error_page import page_error
    from app.ui.live import start_live_updates
    from app.ui.routes import devices, dra, events, extended, login, missing, nodes, overview, pods
    from app.ui.security import SecurityHeadersMiddleware
    from app.ui.stream import router as stream_router
    from app.ui.stream_limits import LiveStreams, start_stream_checks
    from app.ui.templating import STATIC, build_environment

    app.state.ui_templates = build_environment()
    app.state.ui_cache = PageCache()
    app.state.live = None
    app.state.live_streams = LiveStreams(app.state.settings.max_live_streams)
    for module in (overview, nodes, devices, dra, pods, events, login, extended):
        app.include_router(module.router)
    app.include_router(stream_router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    # Last: it answers every path nothing above matched.
    app.include_router(missing.router)
    app.add_middleware(SecurityHeadersMiddleware)
    install_access_handlers(app)
    app.state.error_page = page_error
    app.state.background_starters.append(start_live_updates)
    app.state.background_starters.append(start_stream_checks)
