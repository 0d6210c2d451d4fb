"""The application's state, typed: what create_app and its lifespan keep for the app's life.

Starlette's `devicedeck.state` takes any attribute; create_app installs a `ServiceState` instead and
sets every attribute below before the first request, so code reads them through
`service_state(app)` with their types, and never needs a default. Parts of the dashboard keep
attributes of their own on it (templates, caches, the live hub), set by `install_ui`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker
from starlette.applications import Starlette
from starlette.datastructures import State

from devicedeck.config import Settings
from devicedeck.credentials.tokens import TokenCache
from devicedeck.db import EventLoopDatabase
from devicedeck.inventory.write.ingest import SnapshotIngest
from devicedeck.kube.client import KubeApi
from devicedeck.kube.service_accounts import ServiceAccountReviewer
from devicedeck.runtime.leadership import Election
from devicedeck.runtime.metrics import ServiceMetrics

if TYPE_CHECKING:
    from devicedeck.web.errors import ErrorPage

# Called in the lifespan with the app and the owner of its background tasks.
BackgroundStarter = Callable[[Any, Any], None]


class ServiceState(State):
    # Set by create_app.
    settings: Settings
    token_cache: TokenCache
    background_starters: list[BackgroundStarter]
    error_page: ErrorPage | None
    # Set when the lifespan starts.
    engine: Engine
    session_factory: sessionmaker[Session]
    event_loop_database: EventLoopDatabase | None
    ingest: SnapshotIngest
    metrics: ServiceMetrics
    # Whether this process runs the work only one process runs (devicedeck/runtime/leadership.py).
    leadership: Election
    # The cluster integration: its client, or why there is none (None when it is off).
    kube_api: KubeApi | None
    kube_problem: str | None
    # Checks agents' ServiceAccount tokens; None without the cluster integration.
    service_account_reviewer: ServiceAccountReviewer | None


def service_state(app: Starlette) -> ServiceState:
    return cast(ServiceState, app.state)
