"""POST /api/v1/ingest/*: snapshots from node agents, handed to the domain's SnapshotIngest."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any, NamedTuple

from fastapi import APIRouter, Body, Request, Response
from pydantic import BaseModel, Field, ValidationError

from devicedeck.api.examples import example
from devicedeck.api.models import NOT_JSON, ErrorOut
from devicedeck.clock import utcnow
from devicedeck.credentials.tokens import Principal, check_node
from devicedeck.db import write_session
from devicedeck.inventory.dra.health_reports import DraHealthSnapshot, apply_dra_health_report
from devicedeck.inventory.errors import DomainError
from devicedeck.inventory.schemas import (
    ListAndWatchPlace,
    ListAndWatchSnapshot,
    PodResourcesSnapshot,
    SnapshotPlace,
    repeat_digest,
)
from devicedeck.inventory.write.ingest import IngestResult
from devicedeck.inventory.write.receipts import PODRESOURCES_STREAM, listandwatch_stream
from devicedeck.web.caller_first import CallerFirstRoute, Shortcut
from devicedeck.web.db_sessions import SessionFactory
from devicedeck.web.principal import Ingester, current_principal
from devicedeck.web.state import service_state


class SnapshotForm(NamedTuple):
    """What a snapshot route's body is: its place in its stream, the stream it names (None
    when the body names none), and the whole snapshot."""

    place: type[SnapshotPlace]
    stream: Callable[[dict[str, Any]], str | None]
    snapshot: type[ListAndWatchSnapshot | PodResourcesSnapshot]


def _listandwatch_stream(body: dict[str, Any]) -> str | None:
    resource = body.get("resource")
    return listandwatch_stream(resource) if isinstance(resource, str) else None


# The snapshot routes by the last segment of their path.
FORMS: dict[str, SnapshotForm] = {
    "listandwatch": SnapshotForm(ListAndWatchPlace, _listandwatch_stream, ListAndWatchSnapshot),
    "podresources": SnapshotForm(
        SnapshotPlace, lambda body: PODRESOURCES_STREAM, PodResourcesSnapshot
    ),
}
# Where a route leaves its body's repeat_digest for the route's own code.
REPEAT_DIGEST = "repeat_digest"


class SnapshotRoute(CallerFirstRoute):
    """A valid snapshot is answered before FastAPI handles the request, which would parse the
    body again and validate it through its own layers. An agent sends the same content every
    few seconds with a new place in its stream: such a snapshot, the body but for its place
    the one this process last stored for the stream, is recorded unchanged without validating
    the whole body: the validation and the content hash are what they were. Any other body is
    validated once into the route's model and applied as the route applies it. A body that
    does not validate, and anything in doubt, takes the route, which answers as it always
    has."""

    def shortcut(self) -> Shortcut | None:
        kind = self.path.rsplit("/", 1)[-1]
        form = FORMS.get(kind)
        if form is None:
            return None

        async def answer_early(request: Request) -> Response | None:
            return await _answer_early(request, kind, form)

        return answer_early


router = APIRouter(prefix="/api/v1/ingest", tags=["ingest"], route_class=SnapshotRoute)

INGEST_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "missing, unknown or revoked token"},
    403: {
        "model": ErrorOut,
        "description": "the token lacks the ingest scope, or is bound to another node "
        "(code node_mismatch); nothing was changed",
    },
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

    model_config = example(
        {
            "changed": True,
            "duplicate": False,
            "late": False,
            "added": 2,
            "removed": 0,
            "reappeared": 0,
            "health_changes": 1,
            "allocated": 0,
            "released": 0,
            "events": 3,
        }
    )

    changed: bool
    duplicate: bool
    late: bool = Field(
        description="the snapshot comes from a boot of its sender that began before the one "
        "whose snapshots the stream applies now; nothing of it was applied"
    )
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


async def _answer_early(request: Request, kind: str, form: SnapshotForm) -> Response | None:
    """The shortcut of `SnapshotRoute`: the route's answer to a valid snapshot, or None."""
    # A query parameter is for the route to refuse; another media type is for it to name.
    if request.scope["query_string"] or request.headers.get("content-type") != "application/json":
        return None
    try:
        body = await request.json()
    except Exception:
        return None  # the route parses the body again and answers as it always does
    if not isinstance(body, dict):
        return None
    digest = repeat_digest(body)
    if digest is not None:
        # Stored with the snapshot, so that the stream's next one, an agent's repeat most
        # often, is known as one.
        setattr(request.state, REPEAT_DIGEST, digest)
        ingest = service_state(request.app).ingest
        if ingest.may_know_repeat(body.get("node"), form.stream(body)):
            answer = await _record_repeat(request, kind, form.place, body, digest)
            if answer is not None:
                return answer
    try:
        snapshot = form.snapshot.model_validate(body)
    except ValidationError:
        return None  # the route answers with FastAPI's account of what is wrong
    principal = await current_principal(request)
    return await _ingest(request, principal, snapshot, kind)


async def _record_repeat(
    request: Request,
    kind: str,
    place_of: type[SnapshotPlace],
    body: dict[str, Any],
    digest: bytes,
) -> Response | None:
    """The answer to a repeat, `body` of digest `digest`, recorded unchanged, or None."""
    try:
        place = place_of.model_validate(body)
    except ValidationError:
        return None
    principal = await current_principal(request)
    if not principal.may_write_node(place.node):
        return None
    state = service_state(request.app)
    started = time.perf_counter()
    if not await state.ingest.record_repeat(place, digest):
        return None
    seconds, count = state.metrics.unchanged_ingest(kind)
    seconds.observe(time.perf_counter() - started)
    count.inc()
    return Response(UNCHANGED, media_type="application/json")


async def _ingest(
    request: Request,
    principal: Principal,
    snapshot: ListAndWatchSnapshot | PodResourcesSnapshot,
    kind: str,
) -> Response:
    """The caller's right to the node, and metrics around the domain's ingest; everything
    else is decided there."""
    check_node(principal, snapshot.node)
    actor = principal.actor_for_node(snapshot.node)
    state = service_state(request.app)
    metrics = state.metrics
    started = time.perf_counter()
    try:
        result = await state.ingest.apply(
            snapshot,
            actor=actor,
            body_bytes=_body_bytes(request),
            body_digest=getattr(request.state, REPEAT_DIGEST, None),
        )
    except DomainError:
        metrics.ingest_total.labels(kind, "refused").inc()
        raise
    metrics.ingest_seconds.labels(kind).observe(time.perf_counter() - started)
    outcome = (
        "duplicate"
        if result.duplicate
        else "late"
        if result.late
        else "changed"
        if result.changed
        else "unchanged"
    )
    metrics.ingest_total.labels(kind, outcome).inc()
    return _ingest_response(result)


def _ingest_response(result: IngestResult) -> Response:
    """Serialised here: given a model to return, FastAPI would validate it all over again,
    a visible share of the CPU an unchanged snapshot costs."""
    body = IngestResponse.model_validate(result, from_attributes=True).model_dump_json()
    return Response(body, media_type="application/json")


# The answer to every unchanged snapshot, serialised once.
UNCHANGED = _ingest_response(IngestResult()).body


def _body_bytes(request: Request) -> int | None:
    length = request.headers.get("content-length")
    return int(length) if length is not None and length.isdigit() else None


@router.post(
    "/listandwatch",
    operation_id="ingestListAndWatch",
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
    return await _ingest(request, principal, snapshot, "listandwatch")


@router.post(
    "/podresources",
    operation_id="ingestPodResources",
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
    return await _ingest(request, principal, snapshot, "podresources")


class DraHealthResponse(BaseModel):
    """What one DRA health report changed."""

    model_config = example(
        {"changed": True, "devices": 2, "health_changes": 1, "unpublished": [], "late": []}
    )

    changed: bool = Field(description="whether any device's reported state differs from before")
    devices: int
    health_changes: int = Field(description="devices whose health this report changed")
    unpublished: list[str] = Field(
        description="pool/device of reported devices that no ResourceSlice of the driver "
        "publishes (yet); recorded all the same"
    )
    late: list[str] = Field(
        description="pool/device of reported devices for which a report observed later (or "
        "checked later by the driver) is stored already; nothing of them was changed"
    )


DRA_HEALTH_EXAMPLE = {
    "node": "gpu-node-1",
    "driver": "gpu.example.com",
    "observed_at": "2026-12-02T12:00:00Z",
    "devices": [
        {
            "device": {"poolName": "gpu-node-1", "deviceName": "gpu-0"},
            "health": "HEALTHY",
            "lastUpdatedTime": "1764676800",
        },
        {
            "device": {"poolName": "gpu-node-1", "deviceName": "gpu-1"},
            "health": "UNHEALTHY",
            "lastUpdatedTime": "1764676800",
            "healthCheckTimeoutSeconds": "60",
            "message": "Xid 79",
        },
    ],
}


@router.post(
    "/dra-health",
    operation_id="ingestDraHealth",
    summary="Apply one DRA driver's health stream message (NodeWatchResources) for a node",
    response_model=DraHealthResponse,
    responses={
        **{status: doc for status, doc in INGEST_ERRORS.items() if status != 409},
        422: {
            "model": ErrorOut,
            "description": "the report breaks a rule, or names a device a ResourceSlice "
            "publishes for another node; nothing was changed",
        },
    },
)
def ingest_dra_health(
    request: Request,
    principal: Ingester,
    factory: SessionFactory,
    snapshot: Annotated[
        DraHealthSnapshot,
        Body(openapi_examples={"two GPUs": {"summary": "two GPUs", "value": DRA_HEALTH_EXAMPLE}}),
    ],
) -> DraHealthResponse:
    check_node(principal, snapshot.node)
    actor = principal.actor_for_node(snapshot.node)
    metrics = service_state(request.app).metrics
    started = time.perf_counter()
    try:
        with write_session(factory) as session:
            result = apply_dra_health_report(session, snapshot, actor=actor, now=utcnow())
    except DomainError:
        metrics.ingest_total.labels("dra-health", "refused").inc()
        raise
    metrics.ingest_seconds.labels("dra-health").observe(time.perf_counter() - started)
    metrics.ingest_total.labels("dra-health", "changed" if result.changed else "unchanged").inc()
    return DraHealthResponse(
        changed=result.changed,
        devices=result.devices,
        health_changes=result.health_changes,
        unpublished=result.unpublished,
        late=result.late,
    )
