"""Advertising extended resources by hand, exactly as the Kubernetes documentation does it.

`PATCH /api/v1/nodes/<node>/status`, Content-Type `application/json-patch+json`, body
`[{"op": "add", "path": "/status/capacity/example.com~1dongle", "value": "4"}]` ("/" in the
name escaped as "~1", RFC 6901), and `"op": "remove"` to take it away. The kubelet then copies
the capacity into allocatable on its own, a little later.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import exists, or_, select
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.db import write_session
from devicedeck.inventory.errors import DomainError, InvalidInput, NotFound, Problem
from devicedeck.inventory.events import EventLog
from devicedeck.inventory.models import Device, Node, PluginRegistration
from devicedeck.kube.client import KubeApi
from devicedeck.kube.errors import (
    KUBE_OFF_MESSAGE,
    ApiStatus,
    ApiUnreachable,
    KubeError,
    KubeRefused,
    KubeUnavailable,
)
from devicedeck.kube.node_sync import apply_node
from devicedeck.kubelet.names import dns1123_subdomain_problem, extended_resource_name_problem

MAX_QUANTITY = 2**63 - 1


class ManagedByPlugin(KubeError):
    code = "managed_by_device_plugin"
    status = 409


def json_pointer_token(name: str) -> str:
    """RFC 6901: "~" becomes "~0" first, then "/" becomes "~1"."""
    return name.replace("~", "~0").replace("/", "~1")


def capacity_patch(resource: str, quantity: int | None) -> list[dict[str, Any]]:
    path = f"/status/capacity/{json_pointer_token(resource)}"
    if quantity is None:
        return [{"op": "remove", "path": path}]
    # "add" on an existing member replaces it (RFC 6902), so it both adds and changes.
    return [{"op": "add", "path": path, "value": str(quantity)}]


def check_names(node: str, resource: str) -> None:
    problems = []
    node_problem = dns1123_subdomain_problem(node)
    if node_problem:
        problems.append(Problem("node", "dns1123_subdomain", node_problem))
    resource_problem = extended_resource_name_problem(resource)
    if resource_problem:
        problems.append(Problem("resource", "extended_resource_name", resource_problem))
    if problems:
        raise InvalidInput("; ".join(f"{p.field} {p.message}" for p in problems), problems)


def _served_by_plugin(session: Session, node: str, resource: str) -> bool:
    node_id = select(Node.id).where(Node.name == node).scalar_subquery()
    return bool(
        session.scalar(
            select(
                or_(
                    exists().where(Device.node_id == node_id, Device.resource == resource),
                    exists().where(
                        PluginRegistration.node_id == node_id,
                        PluginRegistration.resource == resource,
                    ),
                )
            )
        )
    )


def change_extended_resource(
    api: KubeApi | None,
    problem: str | None,
    factory: sessionmaker[Session],
    *,
    node: str,
    resource: str,
    quantity: int | None,
    actor: str,
) -> dict[str, Any]:
    """Set (quantity) or remove (None) a hand-advertised extended resource on a node's status,
    and record who did it in the change log."""
    check_names(node, resource)
    if quantity is not None and not 0 <= quantity <= MAX_QUANTITY:
        raise InvalidInput(
            "quantity is out of range",
            [Problem("quantity", "range", f"must be between 0 and {MAX_QUANTITY}")],
        )
    if api is None:
        raise KubeUnavailable(problem or KUBE_OFF_MESSAGE)
    with factory() as session:
        if quantity is not None and _served_by_plugin(session, node, resource):
            raise ManagedByPlugin(
                f"{resource} on node {node} is served by a device plugin; the kubelet sets its "
                "capacity and would overwrite a hand-set value",
                [Problem("resource", "not_plugin_managed", "is served by a device plugin")],
            )
        known = session.scalar(select(Node.capacity).where(Node.name == node)) or {}
    operations = capacity_patch(resource, quantity)
    try:
        updated = api.patch_node_status(node, operations)
    except ApiUnreachable as e:
        raise KubeUnavailable(f"the API server cannot be reached: {e}") from e
    except ApiStatus as e:
        raise refusal(e, node, resource, removing=quantity is None) from e
    now = utcnow()
    log = EventLog(at=now, actor=actor)
    with write_session(factory) as session:
        stored = apply_node(session, updated, now, log)
        capacity = dict(stored.capacity or {})
        allocatable = dict(stored.allocatable or {})
        log.add(
            "admin_action",
            node=node,
            resource=resource,
            before={"capacity": known.get(resource)},
            after={
                "action": "remove_extended_resource"
                if quantity is None
                else "set_extended_resource",
                "capacity": capacity.get(resource),
                "patch": operations,
            },
        )
        log.write(session)
    return {
        "node": node,
        "resource": resource,
        "quantity": quantity,
        "capacity": capacity.get(resource),
        "allocatable": allocatable.get(resource),
        "patch": operations,
        "actor": actor,
    }


def refusal(e: ApiStatus, node: str, resource: str, *, removing: bool) -> DomainError:
    """The API server's answer in our error shape, with a status that says what to do."""
    said = f"the API server refused the change ({e.code} {e.reason}): {e.message}"
    rule = f"api_server:{e.reason or e.code}"
    if e.code == 404:
        return KubeRefused(said, [Problem("node", rule, f"no node {node!r} in the cluster")], 404)
    if e.code == 403:
        return KubeRefused(
            said + "; Devicedeck's service account needs the patch verb on nodes/status, "
            "which the manifests grant only with the component "
            "deploy/kubernetes/components/node-status-patch",
            [Problem("node", rule, e.message)],
            403,
        )
    if e.code == 409:
        return KubeRefused(said, [Problem("resource", rule, e.message)], 409)
    if e.code in (400, 422):
        if removing:
            # JSON Patch "remove" of a member that is not there is the usual cause.
            return NotFound(
                f"node {node} has no {resource} in status.capacity ({e.message})",
                [Problem("resource", rule, "is not in the node's status.capacity")],
            )
        return KubeRefused(said, [Problem("quantity", rule, e.message)], 422)
    # 401 (our credentials), 429, 5xx: nothing the caller can fix by changing the request.
    return KubeUnavailable(said, [Problem("node", rule, e.message)])
