"""POST /api/v1/ingest/*: snapshots from node agents."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from app.api.deps import Ingester
from app.api.models import ErrorOut
from app.clock import utcnow
from app.config import Settings
from app.db import write_session
from app.inventory.errors import DomainError
from app.inventory.ingest import (
    IngestResult,
    apply_listandwatch_snapshot,
    apply_podresources_snapshot,
)
from app.inventory.schemas import (
    ListAndWatchSnapshot,
    PodResourcesSnapshot,
    check_snapshot_size,
)
from app.metrics import ServiceMetrics

router = APIRouter(prefix="/api/v1/ingest", tags=["ingest"])

INGEST_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "missing, unknown or revoked token"},
    403: {"model": ErrorOut, "description": "the token lacks the ingest scope"},
    409: {
        "model": ErrorOut,
        "description": "an older seq of the same boot, or a seq reused with other content",
    },
    413: {"model": ErrorOut, "description": "request body over the limit"},
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


def _apply(
    request: Request,
    kind: str,
    apply: Callable[..., IngestResult],
    snapshot: Any,
    actor: str,
) -> IngestResponse:
    """Runs in a worker thread. The routes that call it are async so that FastAPI serialises
    the small response in the event loop, not with a second trip through the thread pool."""
    metrics: ServiceMetrics = request.app.state.metrics
    settings: Settings = request.app.state.settings
    started = time.perf_counter()
    try:
        check_snapshot_size(
            snapshot,
            max_devices=settings.max_devices_per_snapshot,
            max_pods=settings.max_pods_per_snapshot,
        )
        with write_session(request.app.state.session_factory) as session:
            result = apply(session, snapshot, now=utcnow(), actor=actor)
    except DomainError:
        metrics.ingest_total.labels(kind, "refused").inc()
        raise
    metrics.ingest_seconds.labels(kind).observe(time.perf_counter() - started)
    outcome = "duplicate" if result.duplicate else "changed" if result.changed else "unchanged"
    metrics.ingest_total.labels(kind, outcome).inc()
    return IngestResponse(**result.as_dict())


@router.post(
    "/listandwatch",
    summary="Replace one (node, resource)'s device list with a ListAndWatch snapshot",
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
) -> IngestResponse:
    return await run_in_threadpool(
        _apply,
        request,
        "listandwatch",
        apply_listandwatch_snapshot,
        snapshot,
        principal.name,
    )


@router.post(
    "/podresources",
    summary="Replace a node's allocations with a PodResources List snapshot",
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
) -> IngestResponse:
    return await run_in_threadpool(
        _apply,
        request,
        "podresources",
        apply_podresources_snapshot,
        snapshot,
        principal.name,
    )
