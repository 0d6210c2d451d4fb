"""The FastAPI application: built from Settings, with everything it owns started in lifespan."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import timedelta

from fastapi import Depends, FastAPI

from devicedeck import __version__
from devicedeck.api import docs, ingest, inventory, kube, openapi, service, tokens
from devicedeck.clock import utcnow
from devicedeck.config import AuthMode, KubeMode, Settings
from devicedeck.credentials.tokens import ANONYMOUS_READER, TokenCache
from devicedeck.db import (
    create_db_engine,
    create_event_loop_database,
    make_session_factory,
)
from devicedeck.inventory.write.ingest import SnapshotIngest
from devicedeck.kube.status import WATCH_STATES, watch_states
from devicedeck.runtime.background import (
    clock_of,
    start_background_tasks,
    start_fleet_gauge_renewal,
    start_stale_sweep,
)
from devicedeck.runtime.fleet_metrics import FleetGauges
from devicedeck.runtime.metrics import ServiceMetrics
from devicedeck.runtime.webhooks import configure_outbox, start_webhook_senders
from devicedeck.ui import install_ui
from devicedeck.web.caller_first import EarlyAnswers
from devicedeck.web.compression import CompressionMiddleware
from devicedeck.web.errors import install_error_handlers
from devicedeck.web.limits import (
    BodyLimitMiddleware,
    ConcurrencyLimitMiddleware,
    reject_nul_parameters,
)
from devicedeck.web.observe import RequestObserver
from devicedeck.web.state import ServiceState, service_state

log = logging.getLogger(__name__)

API_DESCRIPTION = """Every device that Kubernetes device plugins expose on every node: what it
is, how healthy it has been, and which pod holds it. Node agents post kubelet snapshots to
`/api/v1/ingest/*`; everything else reads. Send `Authorization: Bearer <token>`; tokens have the
scopes `read`, `ingest` and `admin`."""


def _watch_states(state: ServiceState, settings: Settings) -> list[tuple[str, str]]:
    if settings.kube is KubeMode.OFF:
        return []  # no statement per scrape for a feature that is off
    with state.session_factory() as session:
        return watch_states(session, settings.kube, state.kube_problem, utcnow())


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = service_state(app)
        engine = create_db_engine(settings.database_url)
        state.engine = engine
        state.session_factory = make_session_factory(engine)
        event_loop_database = create_event_loop_database(settings.database_url)
        state.event_loop_database = event_loop_database
        if event_loop_database is not None:
            await event_loop_database.open()
        configure_outbox(settings, state.session_factory, event_loop_database)
        state.ingest = SnapshotIngest(
            state.session_factory,
            event_loop_database,
            max_devices=settings.max_devices_per_snapshot,
            max_pods=settings.max_pods_per_snapshot,
            max_node_devices=settings.max_devices_per_node,
            stale_after=timedelta(seconds=settings.stale_after),
        )
        state.metrics.watch_fleet(
            FleetGauges(
                state.session_factory,
                lambda: clock_of(settings),
                per_device=settings.metrics_per_device,
                refresh=settings.metrics_refresh,
            )
        )
        state.metrics.watch_cluster(lambda: _watch_states(state, settings), WATCH_STATES)
        if settings.auth is AuthMode.OFF:
            log.warning(
                "AUTHENTICATION IS OFF: anyone who can reach this service can read and change "
                "the inventory. DEVICEDECK_AUTH=off is meant for local demos only.",
                extra={"event": "auth_off"},
            )
        background = start_background_tasks(app)
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
        # Both would load their scripts from a CDN; /docs is served from static/vendor instead.
        docs_url=None,
        redoc_url=None,
    )
    app.state = state = ServiceState()
    state.settings = settings
    state.token_cache = TokenCache(ttl=settings.token_cache_seconds)
    state.metrics = ServiceMetrics(__version__)
    state.error_page = None
    state.kube_api = None
    state.kube_problem = None
    state.service_account_reviewer = None
    # Other parts (dashboard live updates, cluster watcher) add (app, tasks) -> None starters.
    app.state.background_starters = [start_stale_sweep, start_fleet_gauge_renewal]
    if settings.webhook_urls:
        app.state.background_starters.append(start_webhook_senders)
    install_error_handlers(app)
    # The last added runs first: the observer sees every answer, the concurrency limit's
    # 503s included, and the limit comes before anything else. Early answers come last, with
    # every limit applied.
    app.add_middleware(EarlyAnswers)
    app.add_middleware(
        BodyLimitMiddleware, limit=settings.body_limit, read_timeout=settings.body_read_timeout
    )
    app.add_middleware(CompressionMiddleware)
    app.add_middleware(ConcurrencyLimitMiddleware, limit=settings.max_concurrent_requests)
    app.add_middleware(RequestObserver, metrics=state.metrics, access=settings.access_log)
    # Routes are matched in order, and ingest is what agents on every node call, every few
    # seconds.
    app.include_router(ingest.router)
    app.include_router(service.router)
    app.include_router(inventory.router)
    app.include_router(tokens.router)
    app.include_router(docs.router)
    kube.install(app)
    install_ui(app)
    api_routers = [ingest.router, service.router, inventory.router, tokens.router, kube.router]
    open_scopes = ANONYMOUS_READER.scopes if settings.auth is AuthMode.OFF else frozenset()
    openapi.install(app, api_routers, open_scopes)
    return app
