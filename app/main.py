"""The FastAPI application: built from Settings, with everything it owns started in lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from datetime import timedelta
from typing import Any

from fastapi import Depends, FastAPI

from app import __version__
from app.api import ingest, inventory, kube, service, tokens
from app.api.deps import reject_nul_parameters
from app.api.errors import install_error_handlers
from app.api.ingest import RecentContent
from app.api.limits import BodyLimitMiddleware
from app.auth import TokenCache
from app.clock import utcnow
from app.config import AuthMode, Settings
from app.db import (
    create_db_engine,
    create_event_loop_database,
    make_session_factory,
    write_session,
)
from app.inventory.queries import Clock, devices_by_resource_and_health
from app.inventory.staleness import mark_stale_nodes
from app.metrics import ServiceMetrics
from app.ui import install_ui

log = logging.getLogger(__name__)

API_DESCRIPTION = """Every device that Kubernetes device plugins expose on every node: what it
is, how healthy it has been, and which pod holds it. Node agents post kubelet snapshots to
`/api/v1/ingest/*`; everything else reads. Send `Authorization: Bearer <token>`; tokens have the
scopes `read`, `ingest` and `admin`."""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_db_engine(settings.database_url)
        app.state.engine = engine
        app.state.session_factory = make_session_factory(engine)
        event_loop_database = create_event_loop_database(settings.database_url)
        app.state.event_loop_database = event_loop_database
        if event_loop_database is not None:
            await event_loop_database.open()
        app.state.recent_content = RecentContent()
        metrics = ServiceMetrics()
        metrics.watch_inventory(
            app.state.session_factory,
            lambda session: devices_by_resource_and_health(session, _clock(settings)),
        )
        app.state.metrics = metrics
        if settings.auth is AuthMode.OFF:
            log.warning(
                "AUTHENTICATION IS OFF: anyone who can reach this service can read and change "
                "the inventory. DEVICEDECK_AUTH=off is meant for local demos only."
            )
        background = BackgroundTasks()
        background.start(stale_sweep(app, settings), name="stale-sweep")
        for starter in app.state.background_starters:
            starter(app, background)
        app.state.background = background
        try:
            yield
        finally:
            await background.stop()
            if event_loop_database is not None:
                await event_loop_database.dispose()
            engine.dispose()

    app = FastAPI(
        title="Devicedeck",
        version=__version__,
        description=API_DESCRIPTION,
        lifespan=lifespan,
        dependencies=[Depends(reject_nul_parameters)],
    )
    app.state.settings = settings
    app.state.token_cache = TokenCache(ttl=settings.token_cache_seconds)
    # Other parts (dashboard live updates, cluster watcher) add (app, tasks) -> None starters.
    app.state.background_starters = []
    install_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware, limit=settings.body_limit)
    # Routes are matched in order, and ingest is what agents on every node call, every few
    # seconds.
    app.include_router(ingest.router)
    app.include_router(service.router)
    app.include_router(inventory.router)
    app.include_router(tokens.router)
    kube.install(app)
    install_ui(app)
    return app


def _clock(settings: Settings) -> Clock:
    return Clock(now=utcnow(), stale_after=timedelta(seconds=settings.stale_after))


class BackgroundTasks:
    """Owns the app's background tasks and cancels them at shutdown."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self.tasks.append(asyncio.create_task(coro, name=name))

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # Cancelling a task does not stop the thread of an asyncio.to_thread call it awaited;
        # wait for those threads, so none holds a database connection when the engine is
        # disposed (it would leak, never to be closed).
        try:
            await asyncio.wait_for(asyncio.get_running_loop().shutdown_default_executor(), 30)
        except TimeoutError:
            log.warning("background threads still running at shutdown after 30 s")


async def stale_sweep(app: FastAPI, settings: Settings) -> None:
    interval = max(1.0, settings.stale_after / 3)
    while True:
        await asyncio.sleep(interval)
        try:
            await asyncio.to_thread(_sweep_once, app, settings)
        except Exception:
            log.exception("stale sweep failed; will retry")


def _sweep_once(app: FastAPI, settings: Settings) -> None:
    clock = _clock(settings)
    with write_session(app.state.session_factory) as session:
        names = mark_stale_nodes(session, clock.now, clock.cutoff)
    if names:
        log.info("nodes turned stale count=%d names=%s", len(names), ",".join(names[:20]))
