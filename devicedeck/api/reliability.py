"""GET /api/v1/reliability/*: the devices that fail most, and per node and resource."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel
from sqlalchemy.orm import Session

from devicedeck.api.envelope import ListEnvelope
from devicedeck.api.examples import example
from devicedeck.api.export import page_or_csv
from devicedeck.api.inventory import CSV, ERRORS, NOT_FOUND, FormatParam
from devicedeck.api.params import Cursor, Limit, Text
from devicedeck.api.vocabulary import ReliabilityDeviceSort, ReliabilityGroupSort, WindowChoice
from devicedeck.inventory.fields import NAME_MAX, NAMESPACE_MAX, RESOURCE_MAX
from devicedeck.inventory.read.pagination import DEFAULT_LIMIT, MAX_KEY, Page
from devicedeck.inventory.read.reliability import (
    DEFAULT_SORT,
    LABEL_MAX,
    Ranking,
    ReliabilityFilters,
    Window,
    choose_window,
    device_figures,
)
from devicedeck.web.db_sessions import QueryClock, ReadSession, SessionFactory
from devicedeck.web.principal import Reader

router = APIRouter(prefix="/api/v1/reliability", tags=["reliability"], responses=ERRORS)

FIGURES_EXAMPLE: dict[str, Any] = {
    "failures": 5,
    "unhealthy_seconds": 5400.0,
    "unhealthy_share": 0.008929,
    "removals": 1,
    "mtbf_seconds": 119880.0,
    "pods_hit": 2,
    "pods_hit_names": ["ml/trainer-0", "ml/trainer-3"],
    "pods_held": 4,
}
DEVICE_EXAMPLE: dict[str, Any] = {
    "id": 17,
    "node": "gpu-node-1",
    "resource": "nvidia.com/gpu",
    "device_id": "GPU-4b3c2d1e",
    **FIGURES_EXAMPLE,
}


class ReliabilityDeviceOut(BaseModel):
    """A device's figures over the window. `failures`: times its reported health turned
    Unhealthy; `mtbf_seconds`: time not Unhealthy per failure (null without one); `pods_hit`:
    pods that held it while it was Unhealthy; `pods_held`: distinct pods that held it."""

    model_config = example(DEVICE_EXAMPLE)

    id: int
    node: str
    resource: str
    device_id: str
    failures: int
    unhealthy_seconds: float
    unhealthy_share: float
    removals: int
    mtbf_seconds: float | None
    pods_hit: int
    pods_hit_names: list[str]
    pods_held: int


class WindowOut(BaseModel):
    model_config = example(
        {"name": "7d", "since": "2026-11-25T12:00:00+00:00", "until": "2026-12-02T12:00:00+00:00"}
    )

    name: str | None
    since: str
    until: str


class DeviceReliabilityOut(ReliabilityDeviceOut):
    model_config = example(
        {
            "window": {
                "name": "7d",
                "since": "2026-11-25T12:00:00+00:00",
                "until": "2026-12-02T12:00:00+00:00",
            },
            **DEVICE_EXAMPLE,
        }
    )

    window: WindowOut


GROUP_EXAMPLE: dict[str, Any] = {
    "devices": 3,
    "failures": 11,
    "unhealthy_seconds": 9000.0,
    "removals": 1,
    "pods_hit": 4,
}


class ReliabilityNodeOut(BaseModel):
    """A node's devices that had a spell of Unhealthy or removal in the window (`devices`),
    their figures summed; `pods_hit` counts each pod once."""

    model_config = example({"node": "gpu-node-1", **GROUP_EXAMPLE})

    node: str
    devices: int
    failures: int
    unhealthy_seconds: float
    removals: int
    pods_hit: int


class ReliabilityResourceOut(BaseModel):
    """As per node, per resource name."""

    model_config = example({"resource": "nvidia.com/gpu", **GROUP_EXAMPLE})

    resource: str
    devices: int
    failures: int
    unhealthy_seconds: float
    removals: int
    pods_hit: int


class ReliabilityLabelOut(BaseModel):
    """Per value of a node label (a GPU model, say): the figures of the nodes that carry it
    summed; `value` is "" for nodes without the label."""

    model_config = example(
        {"label": "nvidia.com/gpu.product", "value": "NVIDIA-H100-80GB-HBM3", "nodes": 2}
        | GROUP_EXAMPLE
    )

    label: str
    value: str
    nodes: int
    devices: int
    failures: int
    unhealthy_seconds: float
    removals: int
    pods_hit: int


DEVICE_COLUMNS = (
    "id", "node", "resource", "device_id", "failures", "unhealthy_seconds", "unhealthy_share",
    "removals", "mtbf_seconds", "pods_hit", "pods_held", "pods_hit_names",
)  # fmt: skip
GROUP_COLUMNS = ("devices", "failures", "unhealthy_seconds", "removals", "pods_hit")

WindowParam = Annotated[
    WindowChoice | None,
    Query(description="24h, 7d or 30d ending now (7d unless since is given)"),
]
Since = Annotated[datetime | None, Query(description="start of the window, with its offset")]
Until = Annotated[datetime | None, Query(description="end of the window (now if left out)")]
NodePrefix = Annotated[
    str | None, Query(max_length=NAME_MAX, description="nodes whose name starts with this")
]
Resource = Annotated[str | None, Query(max_length=RESOURCE_MAX)]
Namespace = Annotated[
    str | None,
    Query(max_length=NAMESPACE_MAX, description="devices a pod of this namespace held in it"),
]
SORT_HELP = "a figure, smallest first; '-' for largest first (worst first: -failures)"


def window_of(
    clock: QueryClock, window: str | None, since: datetime | None, until: datetime | None
) -> Window:
    return choose_window(clock.now, window, since, until)


@router.get(
    "/devices",
    operation_id="listReliabilityDevices",
    response_model=ListEnvelope[ReliabilityDeviceOut],
    responses=CSV,
    summary="Devices that turned Unhealthy or were removed in the window, worst first",
)
def devices(
    request: Request,
    session: ReadSession,
    factory: SessionFactory,
    _: Reader,
    clock: QueryClock,
    window: WindowParam = None,
    since: Since = None,
    until: Until = None,
    node: Text = None,
    node_prefix: NodePrefix = None,
    resource: Resource = None,
    namespace: Namespace = None,
    sort: Annotated[ReliabilityDeviceSort, Query(description=SORT_HELP)] = DEFAULT_SORT,
    cursor: Cursor = None,
    limit: Limit = DEFAULT_LIMIT,
    format: FormatParam = "json",
) -> dict[str, Any] | Response:
    span = window_of(clock, window, since, until)
    filters = ReliabilityFilters(
        node=node, node_prefix=node_prefix, resource=resource, namespace=namespace
    )

    def fetch(session: Session, after: str | None, size: int) -> Page[dict[str, Any]]:
        return Ranking(session, filters, span).devices(sort=sort, cursor=after, limit=size)

    return page_or_csv(
        request,
        session,
        factory,
        fetch,
        format=format,
        cursor=cursor,
        limit=limit,
        columns=DEVICE_COLUMNS,
        filename="reliability-devices.csv",
    )


def _groups(
    by: str,
    request: Request,
    session: Session,
    factory: SessionFactory,
    span: Window,
    filters: ReliabilityFilters,
    sort: str,
    cursor: str | None,
    limit: int,
    format: str,
) -> dict[str, Any] | Response:
    def fetch(session: Session, after: str | None, size: int) -> Page[dict[str, Any]]:
        return Ranking(session, filters, span).groups(by, sort=sort, cursor=after, limit=size)

    return page_or_csv(
        request,
        session,
        factory,
        fetch,
        format="csv" if format == "csv" else "json",
        cursor=cursor,
        limit=limit,
        columns=(by, *GROUP_COLUMNS),
        filename=f"reliability-{by}s.csv",
    )


@router.get(
    "/nodes",
    operation_id="listReliabilityNodes",
    response_model=ListEnvelope[ReliabilityNodeOut],
    responses=CSV,
    summary="Per node: its devices' failures, time Unhealthy, removals and pods hit",
)
def nodes(
    request: Request,
    session: ReadSession,
    factory: SessionFactory,
    _: Reader,
    clock: QueryClock,
    window: WindowParam = None,
    since: Since = None,
    until: Until = None,
    node_prefix: NodePrefix = None,
    resource: Resource = None,
    namespace: Namespace = None,
    sort: Annotated[ReliabilityGroupSort, Query(description=SORT_HELP)] = DEFAULT_SORT,
    cursor: Cursor = None,
    limit: Limit = DEFAULT_LIMIT,
    format: FormatParam = "json",
) -> dict[str, Any] | Response:
    filters = ReliabilityFilters(node_prefix=node_prefix, resource=resource, namespace=namespace)
    span = window_of(clock, window, since, until)
    return _groups("node", request, session, factory, span, filters, sort, cursor, limit, format)


@router.get(
    "/resources",
    operation_id="listReliabilityResources",
    response_model=ListEnvelope[ReliabilityResourceOut],
    responses=CSV,
    summary="Per resource name: its devices' failures, time Unhealthy, removals and pods hit",
)
def resources(
    request: Request,
    session: ReadSession,
    factory: SessionFactory,
    _: Reader,
    clock: QueryClock,
    window: WindowParam = None,
    since: Since = None,
    until: Until = None,
    node: Text = None,
    node_prefix: NodePrefix = None,
    namespace: Namespace = None,
    sort: Annotated[ReliabilityGroupSort, Query(description=SORT_HELP)] = DEFAULT_SORT,
    cursor: Cursor = None,
    limit: Limit = DEFAULT_LIMIT,
    format: FormatParam = "json",
) -> dict[str, Any] | Response:
    filters = ReliabilityFilters(node=node, node_prefix=node_prefix, namespace=namespace)
    span = window_of(clock, window, since, until)
    return _groups(
        "resource", request, session, factory, span, filters, sort, cursor, limit, format
    )


@router.get(
    "/labels",
    operation_id="listReliabilityByLabel",
    response_model=ListEnvelope[ReliabilityLabelOut],
    responses=CSV,
    summary="Per value of a node label (such as the GPU model): the nodes' figures summed",
)
def labels(
    request: Request,
    session: ReadSession,
    factory: SessionFactory,
    _: Reader,
    clock: QueryClock,
    label: Annotated[
        str, Query(max_length=LABEL_MAX, description="a node label key: nvidia.com/gpu.product")
    ],
    window: WindowParam = None,
    since: Since = None,
    until: Until = None,
    node_prefix: NodePrefix = None,
    resource: Resource = None,
    namespace: Namespace = None,
    sort: Annotated[ReliabilityGroupSort, Query(description=SORT_HELP)] = DEFAULT_SORT,
    cursor: Cursor = None,
    limit: Limit = DEFAULT_LIMIT,
    format: FormatParam = "json",
) -> dict[str, Any] | Response:
    filters = ReliabilityFilters(node_prefix=node_prefix, resource=resource, namespace=namespace)
    span = window_of(clock, window, since, until)

    def fetch(session: Session, after: str | None, size: int) -> Page[dict[str, Any]]:
        return Ranking(session, filters, span).by_label(label, sort=sort, cursor=after, limit=size)

    return page_or_csv(
        request,
        session,
        factory,
        fetch,
        format=format,
        cursor=cursor,
        limit=limit,
        columns=("label", "value", "nodes", *GROUP_COLUMNS),
        filename="reliability-labels.csv",
    )


@router.get(
    "/devices/{id}",
    operation_id="getDeviceReliability",
    response_model=DeviceReliabilityOut,
    responses=NOT_FOUND,
    summary="One device's figures over the window (zero when it neither failed nor left)",
)
def device(
    session: ReadSession,
    _: Reader,
    clock: QueryClock,
    id: Annotated[int, Path(ge=1, le=MAX_KEY)],
    window: WindowParam = None,
    since: Since = None,
    until: Until = None,
) -> dict[str, Any]:
    return device_figures(session, id, window_of(clock, window, since, until))
