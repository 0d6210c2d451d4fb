"""GET /api/v1/{nodes,devices,pods,resources,events}: the inventory, read-only."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from devicedeck.api.envelope import ListEnvelope, envelope
from devicedeck.api.export import DEVICE_COLUMNS, EVENT_COLUMNS, Format, page_or_csv
from devicedeck.api.models import (
    DeviceDetailOut,
    DeviceOut,
    ErrorOut,
    EventOut,
    NodeDetailOut,
    NodeOut,
    PodDetailOut,
    PodOut,
    ResourceOut,
)
from devicedeck.api.params import Cursor, Limit, Text
from devicedeck.api.vocabulary import (
    DeviceSort,
    EventKindChoice,
    HealthChoice,
    NodeSort,
    StateChoice,
)
from devicedeck.inventory.fields import NAME_MAX, NAMESPACE_MAX, RESOURCE_MAX
from devicedeck.inventory.read.history import EventFilters, list_events
from devicedeck.inventory.read.pagination import DEFAULT_LIMIT, MAX_KEY, Page
from devicedeck.inventory.read.pod_history import get_pod_history
from devicedeck.inventory.read.pods import PodFilters, list_pods
from devicedeck.inventory.read.queries import (
    DeviceFilters,
    NodeFilters,
    get_device,
    get_node,
    list_devices,
    list_nodes,
    list_resources,
)
from devicedeck.web.db_sessions import QueryClock, ReadSession, SessionFactory
from devicedeck.web.principal import Reader

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "missing, unknown or revoked token"},
    403: {"model": ErrorOut, "description": "the token lacks the read scope"},
    422: {"model": ErrorOut, "description": "a parameter breaks a rule"},
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    404: {"model": ErrorOut, "description": "no such item"},
}

router = APIRouter(prefix="/api/v1", tags=["inventory"], responses=ERRORS)

FormatParam = Annotated[
    Format, Query(description="json (one page), or csv: every matching row, streamed")
]
CSV: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {}}, "description": "JSON, or CSV with `format=csv`"}
}


@router.get(
    "/nodes",
    operation_id="listNodes",
    response_model=ListEnvelope[NodeOut],
    summary="Nodes with device counts",
)
def nodes(
    request: Request,
    session: ReadSession,
    _: Reader,
    clock: QueryClock,
    q: Annotated[
        str | None, Query(max_length=NAME_MAX, description="substring of the name")
    ] = None,
    stale: bool | None = None,
    resource: Annotated[
        str | None, Query(max_length=RESOURCE_MAX, description="only nodes with this resource")
    ] = None,
    sort: Annotated[NodeSort, Query(description="name or last_seen; '-' for descending")] = "name",
    cursor: Cursor = None,
    limit: Limit = DEFAULT_LIMIT,
) -> dict[str, Any]:
    page = list_nodes(
        session,
        NodeFilters(q=q, stale=stale, resource=resource),
        clock,
        sort=sort,
        cursor=cursor,
        limit=limit,
    )
    return envelope(request, page)


@router.get(
    "/nodes/{name}",
    operation_id="getNode",
    response_model=NodeDetailOut,
    responses=NOT_FOUND,
    summary="One node: counts, plugins, kubelet allocatable, capacity",
)
def node(name: str, session: ReadSession, _: Reader, clock: QueryClock) -> dict[str, Any]:
    return get_node(session, name, clock)


@router.get(
    "/devices",
    operation_id="listDevices",
    response_model=ListEnvelope[DeviceOut],
    responses=CSV,
    summary="Devices, filtered",
)
def devices(
    request: Request,
    session: ReadSession,
    factory: SessionFactory,
    _: Reader,
    clock: QueryClock,
    node: Text = None,
    node_prefix: Annotated[
        str | None, Query(max_length=NAME_MAX, description="nodes whose name starts with this")
    ] = None,
    resource: Annotated[str | None, Query(max_length=RESOURCE_MAX)] = None,
    health: Annotated[
        HealthChoice | None, Query(description="Healthy, Unhealthy or Unknown, in any letter case")
    ] = None,
    allocated: Annotated[bool | None, Query(description="true: held by a pod; false: not")] = None,
    namespace: Annotated[str | None, Query(max_length=NAMESPACE_MAX)] = None,
    pod: Text = None,
    state: Annotated[
        StateChoice, Query(description="present, removed or any, in any letter case")
    ] = "present",
    q: Annotated[
        str | None, Query(max_length=NAME_MAX, description="substring of the device ID")
    ] = None,
    sort: Annotated[
        DeviceSort,
        Query(
            description="node, resource, device_id, health, attention (Unhealthy, then "
            "Unknown, then Healthy), health_since, holder or id; '-' for descending"
        ),
    ] = "node",
    cursor: Cursor = None,
    limit: Limit = DEFAULT_LIMIT,
    format: FormatParam = "json",
) -> dict[str, Any] | Response:
    filters = DeviceFilters(
        node=node,
        node_prefix=node_prefix,
        resource=resource,
        health=health,
        allocated=allocated,
        namespace=namespace,
        pod=pod,
        state=state,
        q=q,
    )

    def fetch(session: Session, after: str | None, size: int) -> Page[dict[str, Any]]:
        return list_devices(session, filters, clock, sort=sort, cursor=after, limit=size)

    return page_or_csv(
        request,
        session,
        factory,
        fetch,
        format=format,
        cursor=cursor,
        limit=limit,
        columns=DEVICE_COLUMNS,
        filename="devices.csv",
    )


@router.get(
    "/devices/{id}",
    operation_id="getDevice",
    response_model=DeviceDetailOut,
    responses=NOT_FOUND,
    summary="One device with its health history and allocation history",
)
def device(
    pk: Annotated[
        int,
        Path(
            alias="id",
            ge=1,
            le=MAX_KEY,
            description="the device's `id` in this API; to find a device by the ID its plugin "
            "reports, search with `GET /api/v1/devices?q=`",
        ),
    ],
    session: ReadSession,
    _: Reader,
    clock: QueryClock,
) -> dict[str, Any]:
    return get_device(session, pk, clock)


@router.get(
    "/pods",
    operation_id="listPods",
    response_model=ListEnvelope[PodOut],
    summary="Pods holding devices now",
)
def pods(
    request: Request,
    session: ReadSession,
    _: Reader,
    clock: QueryClock,
    namespace: Annotated[str | None, Query(max_length=NAMESPACE_MAX)] = None,
    node: Text = None,
    q: Annotated[
        str | None, Query(max_length=NAME_MAX, description="substring of the pod name")
    ] = None,
    cursor: Cursor = None,
    limit: Limit = DEFAULT_LIMIT,
) -> dict[str, Any]:
    page = list_pods(
        session, PodFilters(namespace=namespace, node=node, q=q), clock, cursor=cursor, limit=limit
    )
    return envelope(request, page)


@router.get(
    "/pods/{namespace}/{name}",
    operation_id="getPod",
    response_model=PodDetailOut,
    responses=NOT_FOUND,
    summary="One pod, running or finished: every device it held, when, and its health meanwhile",
)
def pod(
    namespace: str, name: str, session: ReadSession, _: Reader, clock: QueryClock
) -> dict[str, Any]:
    return get_pod_history(session, namespace, name, clock)


@router.get(
    "/resources",
    operation_id="listResources",
    response_model=ListEnvelope[ResourceOut],
    summary="Per resource name: cluster totals (per-node counts: /nodes?resource=NAME)",
)
def resources(
    request: Request,
    session: ReadSession,
    _: Reader,
    clock: QueryClock,
    cursor: Cursor = None,
    limit: Limit = DEFAULT_LIMIT,
) -> dict[str, Any]:
    return envelope(request, list_resources(session, clock, cursor=cursor, limit=limit))


@router.get(
    "/events",
    operation_id="listEvents",
    response_model=ListEnvelope[EventOut],
    responses=CSV,
    summary="The change log, newest first",
)
def events(
    request: Request,
    session: ReadSession,
    factory: SessionFactory,
    _: Reader,
    node: Text = None,
    resource: Annotated[str | None, Query(max_length=RESOURCE_MAX)] = None,
    kind: Annotated[EventKindChoice | None, Query(max_length=32)] = None,
    since: Annotated[
        datetime | None, Query(description="RFC 3339 time with offset; events at or after it")
    ] = None,
    until: Annotated[
        datetime | None, Query(description="RFC 3339 time with offset; events at or before it")
    ] = None,
    device: Annotated[int | None, Query(ge=1, le=MAX_KEY, description="device id")] = None,
    device_id: Annotated[
        str | None, Query(max_length=NAME_MAX, description="the device ID its plugin reports")
    ] = None,
    namespace: Annotated[str | None, Query(max_length=NAMESPACE_MAX)] = None,
    pod: Text = None,
    cursor: Cursor = None,
    limit: Limit = DEFAULT_LIMIT,
    format: FormatParam = "json",
) -> dict[str, Any] | Response:
    filters = EventFilters(
        node=node,
        resource=resource,
        kind=kind,
        since=since,
        until=until,
        device=device,
        device_id=device_id,
        namespace=namespace,
        pod=pod,
    )

    def fetch(session: Session, after: str | None, size: int) -> Page[dict[str, Any]]:
        return list_events(session, filters, cursor=after, limit=size)

    return page_or_csv(
        request,
        session,
        factory,
        fetch,
        format=format,
        cursor=cursor,
        limit=limit,
        columns=EVENT_COLUMNS,
        filename="events.csv",
    )
