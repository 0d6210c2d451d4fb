"""Cluster routes: the watcher's status, pods and DRA devices from the API server, and
hand-advertised extended resources on node status (scope admin)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Path, Query, Request
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.api.envelope import ListEnvelope, envelope
from devicedeck.api.kube_models import (
    ClusterStatusOut,
    DraDeviceDetailOut,
    DraDeviceOut,
    ExtendedResourceChangeOut,
    ExtendedResourceIn,
    KubePodOut,
)
from devicedeck.api.models import NOT_JSON, ErrorOut
from devicedeck.api.params import Cursor, Limit, Text
from devicedeck.api.vocabulary import HealthChoice
from devicedeck.clock import utcnow
from devicedeck.inventory.cluster.pods import KubePodFilters, list_kube_pods
from devicedeck.inventory.dra.devices import DraFilters, list_dra_devices
from devicedeck.inventory.dra.history import dra_device_details
from devicedeck.inventory.errors import NotFound
from devicedeck.inventory.fields import NAME_MAX, NAMESPACE_MAX, RESOURCE_MAX
from devicedeck.inventory.read.pagination import DEFAULT_LIMIT
from devicedeck.kube.extended_admin import change_extended_resource
from devicedeck.kube.status import cluster_status
from devicedeck.kube.watcher import start_cluster_integration
from devicedeck.web.caller_first import CallerFirstRoute
from devicedeck.web.db_sessions import CurrentSettings, ReadSession, SessionFactory
from devicedeck.web.principal import Admin, Reader
from devicedeck.web.state import service_state

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "missing, unknown or revoked token"},
    403: {"model": ErrorOut, "description": "the token lacks the scope"},
    422: {"model": ErrorOut, "description": "a parameter breaks a rule"},
}
ADMIN_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    403: {
        "model": ErrorOut,
        "description": "the token lacks the admin scope, or RBAC denies Devicedeck the patch",
    },
    404: {"model": ErrorOut, "description": "no such node, or (DELETE) no such capacity entry"},
    409: {"model": ErrorOut, "description": "a device plugin serves this resource on the node"},
    503: {
        "model": ErrorOut,
        "description": "DEVICEDECK_KUBE is off, or the API server cannot be reached",
    },
}

router = APIRouter(
    prefix="/api/v1", tags=["cluster"], responses=ERRORS, route_class=CallerFirstRoute
)

NodeName = Annotated[str, Path(max_length=NAME_MAX, description="the node's name")]
ResourceName = Annotated[
    str, Path(max_length=RESOURCE_MAX, description="extended resource name; keeps its '/'")
]


@router.get(
    "/cluster/status",
    operation_id="getClusterStatus",
    response_model=ClusterStatusOut,
    summary="The cluster watcher: mode, and per watched collection its state and last error",
)
def status(
    request: Request, session: ReadSession, _: Reader, settings: CurrentSettings
) -> dict[str, Any]:
    problem = service_state(request.app).kube_problem
    return cluster_status(session, settings.kube, problem, utcnow())


@router.get(
    "/cluster/pods",
    operation_id="listClusterPods",
    response_model=ListEnvelope[KubePodOut],
    summary="Pods that request extended resources or DRA claims, from the API server",
)
def pods(
    request: Request,
    session: ReadSession,
    _: Reader,
    namespace: Annotated[str | None, Query(max_length=NAMESPACE_MAX)] = None,
    node: Text = None,
    phase: Annotated[str | None, Query(max_length=32)] = None,
    deleted: Annotated[bool, Query(description="true: pods deleted recently instead")] = False,
    cursor: Cursor = None,
    limit: Limit = DEFAULT_LIMIT,
) -> dict[str, Any]:
    filters = KubePodFilters(namespace=namespace, node=node, phase=phase, deleted=deleted)
    return envelope(request, list_kube_pods(session, filters, cursor=cursor, limit=limit))


@router.get(
    "/dra/devices",
    operation_id="listDraDevices",
    response_model=ListEnvelope[DraDeviceOut],
    summary="DRA devices (highest pool generation) with the claims and pods using them",
)
def dra_devices(
    request: Request,
    session: ReadSession,
    _: Reader,
    node: Text = None,
    driver: Text = None,
    pool: Text = None,
    allocated: Annotated[bool | None, Query(description="true: allocated to a claim")] = None,
    health: Annotated[
        HealthChoice | None,
        Query(max_length=32, description="Healthy, Unhealthy, or Unknown (nothing reported)"),
    ] = None,
    cursor: Cursor = None,
    limit: Limit = DEFAULT_LIMIT,
) -> dict[str, Any]:
    filters = DraFilters(node=node, driver=driver, pool=pool, allocated=allocated, health=health)
    return envelope(request, list_dra_devices(session, filters, cursor=cursor, limit=limit))


@router.get(
    "/dra/drivers/{driver}/pools/{pool:path}/devices/{device}",
    operation_id="getDraDevice",
    response_model=DraDeviceDetailOut,
    responses={404: {"model": ErrorOut, "description": "no such DRA device, now or before"}},
    summary="One DRA device: its state now, its health history and who held it",
)
def dra_device(
    session: ReadSession,
    _: Reader,
    driver: Annotated[str, Path(max_length=NAME_MAX)],
    pool: Annotated[str, Path(max_length=NAME_MAX, description="may contain '/'")],
    device: Annotated[str, Path(max_length=NAME_MAX)],
) -> dict[str, Any]:
    details = dra_device_details(session, driver, pool, device)
    if details is None:
        raise NotFound(f"no DRA device {driver}/{pool}/{device}")
    return details


@router.put(
    "/nodes/{node}/extended-resources/{resource:path}",
    operation_id="setExtendedResource",
    response_model=ExtendedResourceChangeOut,
    responses={**ADMIN_ERRORS, **NOT_JSON},
    summary="Advertise (or change) an extended resource on the node's status.capacity",
)
def set_extended_resource(
    request: Request,
    node: NodeName,
    resource: ResourceName,
    body: ExtendedResourceIn,
    principal: Admin,
    factory: SessionFactory,
) -> dict[str, Any]:
    return _change(request, factory, node, resource, body.quantity, principal.name)


@router.delete(
    "/nodes/{node}/extended-resources/{resource:path}",
    operation_id="removeExtendedResource",
    response_model=ExtendedResourceChangeOut,
    responses=ADMIN_ERRORS,
    summary="Remove a hand-advertised extended resource from the node's status.capacity",
)
def remove_extended_resource(
    request: Request,
    node: NodeName,
    resource: ResourceName,
    principal: Admin,
    factory: SessionFactory,
) -> dict[str, Any]:
    return _change(request, factory, node, resource, None, principal.name)


def _change(
    request: Request,
    factory: sessionmaker[Session],
    node: str,
    resource: str,
    quantity: int | None,
    actor: str,
) -> dict[str, Any]:
    return change_extended_resource(
        service_state(request.app).kube_api,
        service_state(request.app).kube_problem,
        factory,
        node=node,
        resource=resource,
        quantity=quantity,
        actor=actor,
    )


def install(app: FastAPI) -> None:
    """Routes and the watcher starter; a KubeError carries its own status (web/errors.py)."""
    app.include_router(router)
    app.state.background_starters.append(start_cluster_integration)
