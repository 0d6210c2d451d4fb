"""POST /api/v1/ingest/*: snapshots from node agents."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError
from starlette.concurrency import run_in_threadpool

from app.api.models import NOT_JSON, ErrorOut
from app.clock import utcnow
from app.config import Settings
from app.db import EventLoopDatabase, write_session
from app.inventory.errors import DomainError
from app.inventory.ingest import (
    IngestResult,
    apply_listandwatch_snapshot,
    apply_podresources_snapshot,
)
from app.inventory.nodes import (
    PODRESOURCES_STREAM,
    listandwatch_stream,
    record_unchanged_snapshot_async,
    unchanged_check,
)
from app.inventory.schemas import (
    ListAndWatchSnapshot,
    PodResourcesSnapshot,
    check_snapshot_size,
)
from app.metrics import ServiceMetrics
from app.web.principal import Ingester

router = APIRouter(prefix="/api/v1/ingest", tags=["ingest"])

INGEST_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "missing, unknown or revoked token"},
    403: {"model": ErrorOut, "description": "the token lacks the ingest scope"},
    409: {
        "model": ErrorOut,
        "description": "an older seq of the same boot, or a seq reused with other content",
    },
    413: {"model": ErrorOut, "description": "request body over the limit"},
    **NOT_JSON,
    422: {"model": ErrorOut, "description": "the snapshot breaks a rule; nothing was changed"},
}


class IngestResponse(BaseModel):
    """What one snapshot changed; all zero and `changed` false for an unchanged snapshot."""

    changed: bool
    duplicate: bool
    added: int
    removed: int
    reappeared: int
    health_changes: int
    allocated: int
    released: int
    events: int


LISTANDWATCH_EXAMPLE = {
    "node": "gpu-node-1",
    "resource": "example.com/dongle",
    "source": {"boot_id": "5c0e3b0e-boot-1", "seq": 42},
    "observed_at": "2026-12-02T12:00:00Z",
    "plugin": {
        "endpoint": "example.com-dongle.sock",
        "version": "v1beta1",
        "options": {"pre_start_required": False, "get_preferred_allocation_available": True},
    },
    "devices": [
        {"ID": "dongle-0", "health": "Healthy", "topology": {"nodes": [{"ID": 0}]}},
        {"ID": "dongle-1", "health": "Unhealthy", "topology": {"nodes": [{"ID": 1}]}},
    ],
}

PODRESOURCES_EXAMPLE = {
    "node": "gpu-node-1",
    "source": {"boot_id": "5c0e3b0e-boot-1", "seq": 43},
    "observed_at": "2026-12-02T12:00:00Z",
    "podResources": [
        {
            "name": "trainer-0",
            "namespace": "ml",
            "containers": [
                {
                    "name": "main",
                    "devices": [
                        {
                            "resourceName": "example.com/dongle",
                            "deviceIds": ["dongle-0"],
                            "topology": {"nodes": [{"ID": "0"}]},
                        }
                    ],
                }
            ],
        }
    ],
    "allocatable": {
        "devices": [
            {"resourceName": "example.com/dongle", "deviceIds": ["dongle-0"]},
        ]
    },
}


class RecentContent:
    """The content hash this process last stored for each stream: a hint of whether the next
    snapshot is likely unchanged, and so worth the one-statement check before the full path.
    A wrong hint (after a restart, or when another replica took the last snapshot) costs time,
    never correctness: the full path finds an unchanged snapshot unchanged by itself."""

    MAX_ENTRIES = 100_000

    def __init__(self) -> None:
        self._hashes: dict[tuple[str, str], str] = {}

    def may_be_unchanged(self, node: str, stream: str, content_hash: str) -> bool:
        """False only when this process last stored other content for the stream."""
        return self._hashes.get((node, stream), content_hash) == content_hash

    def remember(self, node: str, stream: str, content_hash: str) -> None:
        if len(self._hashes) >= self.MAX_ENTRIES:
            self._hashes.clear()
        self._hashes[(node, stream)] = content_hash


# Bodies up to this size are applied in the event loop on PostgreSQL: an ordinary node's
# snapshot is a few KiB. A larger one goes to a worker thread, so that applying it does not
# hold up every other request, /livez included, for its whole duration.
EVENT_LOOP_MAX_BODY = 32 * 1024


async def _ingest(
    request: Request,
    kind: str,
    stream: str,
    apply: Callable[..., IngestResult],
    snapshot: ListAndWatchSnapshot | PodResourcesSnapshot,
    actor: str,
) -> Response:
    """Where the hint says the content may be unchanged, try the one-statement check first;
    then apply the snapshot in full, in the event loop where the database and its size allow,
    else in one trip through the thread pool."""
    metrics: ServiceMetrics = request.app.state.metrics
    settings: Settings = request.app.state.settings
    recent: RecentContent = request.app.state.recent_content
    started = time.perf_counter()
    try:
        check_snapshot_size(
            snapshot,
            max_devices=settings.max_devices_per_snapshot,
            max_pods=settings.max_pods_per_snapshot,
        )
        content_hash = snapshot.content_hash()
        check_unchanged_first = recent.may_be_unchanged(snapshot.node, stream, content_hash)
        unchanged = None
        if check_unchanged_first:
            unchanged = await _unchanged_in_event_loop(request, snapshot, stream, content_hash)
            # None: the check could not run here, and the full path makes it itself.
            check_unchanged_first = unchanged is None
        if unchanged:
            result = IngestResult()
        else:
            apply_snapshot = functools.partial(
                apply,
                snapshot=snapshot,
                actor=actor,
                content_hash=content_hash,
                check_unchanged_first=check_unchanged_first,
            )
            applied = await _apply_in_event_loop(request, apply_snapshot)
            if applied is None:
                applied = await run_in_threadpool(_apply_in_thread, request, apply_snapshot)
            result = applied
    except DomainError:
        metrics.ingest_total.labels(kind, "refused").inc()
        raise
    recent.remember(snapshot.node, stream, content_hash)
    metrics.ingest_seconds.labels(kind).observe(time.perf_counter() - started)
    outcome = "duplicate" if result.duplicate else "changed" if result.changed else "unchanged"
    metrics.ingest_total.labels(kind, outcome).inc()
    return _ingest_response(result)


def _ingest_response(result: IngestResult) -> Response:
    """Serialised here: given a model to return, FastAPI would validate it all over again,
    a visible share of the CPU an unchanged snapshot costs."""
    body = IngestResponse.model_validate(result, from_attributes=True).model_dump_json()
    return Response(body, media_type="application/json")


async def _unchanged_in_event_loop(
    request: Request,
    snapshot: ListAndWatchSnapshot | PodResourcesSnapshot,
    stream: str,
    content_hash: str,
) -> bool | None:
    """Whether the fast path recorded the snapshot as unchanged; None when it could not run
    (SQLite, a pooled connection the server dropped, a statement the database refused):
    nothing was changed."""
    database: EventLoopDatabase | None = request.app.state.event_loop_database
    if database is None:
        return None
    check = unchanged_check(snapshot, stream=stream, content_hash=content_hash, now=utcnow())
    return await record_unchanged_snapshot_async(database.statements, check)


ApplySnapshot = Callable[..., IngestResult]


async def _apply_in_event_loop(
    request: Request, apply_snapshot: ApplySnapshot
) -> IngestResult | None:
    """The full path in the event loop; None when it is not for here (SQLite, a large body) or
    met a pooled connection the server dropped, and the caller should use a worker thread.

    After a drop the worker thread applies the snapshot again. That is safe: the transaction
    here rolled back, or, if the drop came during COMMIT and the commit took, the same seq with
    the same content is answered as a repeat."""
    database: EventLoopDatabase | None = request.app.state.event_loop_database
    if database is None or not _small_body(request):
        return None
    try:
        async with database.sessions() as session, session.begin():
            return await session.run_sync(lambda sync: apply_snapshot(sync, now=utcnow()))
    except DBAPIError as e:
        if e.connection_invalidated:
            return None
        raise


def _small_body(request: Request) -> bool:
    length = request.headers.get("content-length")
    return length is not None and length.isdigit() and int(length) <= EVENT_LOOP_MAX_BODY


def _apply_in_thread(request: Request, apply_snapshot: ApplySnapshot) -> IngestResult:
    with write_session(request.app.state.session_factory) as session:
        return apply_snapshot(session, now=utcnow())


@router.post(
    "/listandwatch",
    summary="Replace one (node, resource)'s device list with a ListAndWatch snapshot",
    response_model=IngestResponse,
    responses=INGEST_ERRORS,
)
async def ingest_listandwatch(
    request: Request,
    principal: Ingester,
    snapshot: Annotated[
        ListAndWatchSnapshot,
        Body(
            openapi_examples={"dongles": {"summary": "two dongles", "value": LISTANDWATCH_EXAMPLE}}
        ),
    ],
) -> Response:
    stream = listandwatch_stream(snapshot.resource)
    return await _ingest(
        request, "listandwatch", stream, apply_listandwatch_snapshot, snapshot, principal.name
    )


@router.post(
    "/podresources",
    summary="Replace a node's allocations with a PodResources List snapshot",
    response_model=IngestResponse,
    responses=INGEST_ERRORS,
)
async def ingest_podresources(
    request: Request,
    principal: Ingester,
    snapshot: Annotated[
        PodResourcesSnapshot,
        Body(
            openapi_examples={
                "one pod": {"summary": "one pod holding a dongle", "value": PODRESOURCES_EXAMPLE}
            }
        ),
    ],
) -> Response:
    return await _ingest(
        request,
        "podresources",
        PODRESOURCES_STREAM,
        apply_podresources_snapshot,
        snapshot,
        principal.name,
    )
