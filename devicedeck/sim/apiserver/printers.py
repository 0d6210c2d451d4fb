"""What `kubectl get` shows of each kind: the columns of its table, and each object's cells.

The columns are the ones kubectl shows against a real cluster, each with a priority: 0 for
the default view, 1 for `-o wide` only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

NONE = "<none>"
UNKNOWN = "<unknown>"
ROLE_PREFIX = "node-role.kubernetes.io/"
ROLE_LABEL = "kubernetes.io/role"


@dataclass(frozen=True)
class Column:
    name: str
    description: str
    priority: int = 0
    type: str = "string"
    format: str = ""

    def definition(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        }


Cells = Callable[[dict[str, Any], datetime], list[Any]]
NAME = Column("Name", "The object's name, unique in its namespace.", format="name")
AGE = Column("Age", "How long ago the object was created.")


# --- formatting ------------------------------------------------------------------------------


def parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """A duration as kubectl prints an age: two units at most, coarser as it grows."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return f"{minutes}m{whole % 60}s" if whole % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"


def since(text: Any, now: datetime) -> str:
    when = parse_time(text)
    return human_duration((now - when).total_seconds()) if when else UNKNOWN


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _age(obj: dict[str, Any], now: datetime) -> str:
    return since(_dict(obj.get("metadata")).get("creationTimestamp"), now)


def _name(obj: dict[str, Any]) -> str:
    return str(_dict(obj.get("metadata")).get("name", ""))


# --- nodes -----------------------------------------------------------------------------------

NODE_COLUMNS = (
    NAME,
    Column("Status", "Ready or NotReady, and SchedulingDisabled when the node is cordoned."),
    Column("Roles", "The roles its node-role.kubernetes.io/ labels give the node."),
    AGE,
    Column("Version", "The version its kubelet reports."),
    Column("Internal-IP", "The node's first InternalIP address.", 1),
    Column("External-IP", "The node's first ExternalIP address.", 1),
    Column("OS-Image", "The operating system its kubelet reports.", 1),
    Column("Kernel-Version", "The kernel its kubelet reports.", 1),
    Column("Container-Runtime", "The container runtime and its version.", 1),
)


def node_status_text(node: dict[str, Any]) -> str:
    """Ready, NotReady or Unknown (no Ready condition), then SchedulingDisabled if cordoned."""
    conditions = _list(_dict(node.get("status")).get("conditions"))
    ready = next((c for c in conditions if _dict(c).get("type") == "Ready"), None)
    words = (
        ["Unknown"] if ready is None else ["Ready" if ready.get("status") == "True" else "NotReady"]
    )
    if _dict(node.get("spec")).get("unschedulable") is True:
        words.append("SchedulingDisabled")
    return ",".join(words)


def _node_roles(labels: dict[str, Any]) -> str:
    roles = set()
    for key, value in labels.items():
        if key.startswith(ROLE_PREFIX) and key[len(ROLE_PREFIX) :]:
            roles.add(key[len(ROLE_PREFIX) :])
        elif key == ROLE_LABEL and value:
            roles.add(str(value))
    return ",".join(sorted(roles)) or NONE


def _address(node: dict[str, Any], kind: str) -> str:
    for address in _list(_dict(node.get("status")).get("addresses")):
        if _dict(address).get("type") == kind:
            return str(address.get("address", ""))
    return NONE


def node_cells(node: dict[str, Any], now: datetime) -> list[Any]:
    info = _dict(_dict(node.get("status")).get("nodeInfo"))
    return [
        _name(node),
        node_status_text(node),
        _node_roles(_dict(_dict(node.get("metadata")).get("labels"))),
        _age(node, now),
        str(info.get("kubeletVersion", "")),
        _address(node, "InternalIP"),
        _address(node, "ExternalIP"),
        info.get("osImage") or UNKNOWN,
        info.get("kernelVersion") or UNKNOWN,
        info.get("containerRuntimeVersion") or UNKNOWN,
    ]


# --- pods ------------------------------------------------------------------------------------

POD_COLUMNS = (
    NAME,
    Column("Ready", "Ready containers of all the pod's containers."),
    Column("Status", "What the pod is doing, from its phase and its containers' states."),
    Column("Restarts", "How often its containers restarted, and when the last one did."),
    AGE,
    Column("IP", "The pod's first IP address.", 1),
    Column("Node", "The node the pod is bound to.", 1),
    Column("Nominated Node", "The node the scheduler means to preempt pods on for it.", 1),
    Column("Readiness Gates", "Readiness gates that are met, of all the pod's gates.", 1),
)


def _container_reason(state: dict[str, Any]) -> str | None:
    """Why a container is not running, if it is not."""
    waiting, terminated = _dict(state.get("waiting")), state.get("terminated")
    if waiting.get("reason"):
        return str(waiting["reason"])
    if isinstance(terminated, dict):
        if terminated.get("reason"):
            return str(terminated["reason"])
        if terminated.get("signal"):
            return f"Signal:{terminated['signal']}"
        return f"ExitCode:{terminated.get('exitCode', 0)}"
    return None


def _is_sidecar(container: dict[str, Any]) -> bool:
    return _dict(container).get("restartPolicy") == "Always"


def pod_status_text(pod: dict[str, Any]) -> tuple[str, int, int]:
    """(status, ready containers, containers) as `kubectl get pods` shows them."""
    spec, status = _dict(pod.get("spec")), _dict(pod.get("status"))
    phase = str(status.get("phase") or "")
    reason = str(status.get("reason") or phase)
    init_specs = {str(_dict(c).get("name")): _dict(c) for c in _list(spec.get("initContainers"))}
    total = len(_list(spec.get("containers"))) + sum(map(_is_sidecar, init_specs.values()))
    ready = 0
    initializing = False
    for index, container in enumerate(_list(status.get("initContainerStatuses"))):
        container = _dict(container)
        state = _dict(container.get("state"))
        terminated = state.get("terminated")
        if isinstance(terminated, dict) and terminated.get("exitCode", 0) == 0:
            continue
        if _is_sidecar(init_specs.get(str(container.get("name")), {})) and container.get("started"):
            ready += 1 if container.get("ready") else 0
            continue
        why = _container_reason(state)
        initializing = True
        if isinstance(terminated, dict) or (why and why != "PodInitializing"):
            reason = f"Init:{why}"
        else:
            reason = f"Init:{index}/{len(init_specs)}"
        break
    if not initializing:
        running = False
        for container in reversed(_list(status.get("containerStatuses"))):
            container = _dict(container)
            state = _dict(container.get("state"))
            why = _container_reason(state)
            if why:
                reason = why
            elif container.get("ready") and isinstance(state.get("running"), dict):
                running = True
                ready += 1
        if reason == "Completed" and running:
            conditions = _list(status.get("conditions"))
            pod_ready = any(
                _dict(c).get("type") == "Ready" and c.get("status") == "True" for c in conditions
            )
            reason = "Running" if pod_ready else "NotReady"
    if _dict(pod.get("metadata")).get("deletionTimestamp") and phase not in (
        "Succeeded",
        "Failed",
    ):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason, ready, total


def _restarts(pod: dict[str, Any], now: datetime) -> str:
    status = _dict(pod.get("status"))
    count, last = 0, None
    for container in _list(status.get("containerStatuses")) + _list(
        status.get("initContainerStatuses")
    ):
        container = _dict(container)
        count += int(container.get("restartCount") or 0)
        finished = parse_time(
            _dict(_dict(container.get("lastState")).get("terminated")).get("finishedAt")
        )
        if finished and (last is None or finished > last):
            last = finished
    if count and last:
        return f"{count} ({human_duration((now - last).total_seconds())} ago)"
    return str(count)


def _readiness_gates(pod: dict[str, Any]) -> str:
    gates = _list(_dict(pod.get("spec")).get("readinessGates"))
    if not gates:
        return NONE
    met = {
        _dict(c).get("type")
        for c in _list(_dict(pod.get("status")).get("conditions"))
        if _dict(c).get("status") == "True"
    }
    return f"{sum(1 for g in gates if _dict(g).get('conditionType') in met)}/{len(gates)}"


def pod_cells(pod: dict[str, Any], now: datetime) -> list[Any]:
    status = _dict(pod.get("status"))
    reason, ready, total = pod_status_text(pod)
    ips = _list(status.get("podIPs"))
    ip = _dict(ips[0]).get("ip") if ips else status.get("podIP")
    return [
        _name(pod),
        f"{ready}/{total}",
        reason,
        _restarts(pod, now),
        _age(pod, now),
        ip or NONE,
        _dict(pod.get("spec")).get("nodeName") or NONE,
        status.get("nominatedNodeName") or NONE,
        _readiness_gates(pod),
    ]


# --- namespaces, events, leases, everything else ---------------------------------------------

NAMESPACE_COLUMNS = (NAME, Column("Status", "Active, or Terminating."), AGE)


def name_value_age(*path: str) -> Cells:
    """Cells of a name, one field's value (at `path`) and an age."""

    def cells(obj: dict[str, Any], now: datetime) -> list[Any]:
        value: Any = obj
        for key in path:
            value = _dict(value).get(key)
        return [_name(obj), value or "", _age(obj, now)]

    return cells


EVENT_COLUMNS = (
    Column("Last Seen", "How long ago the event last happened."),
    Column("Type", "Normal, or Warning."),
    Column("Reason", "Why the event happened, in one word."),
    Column("Object", "The object the event is about."),
    Column("Subobject", "The part of the object (a container) the event is about.", 1),
    Column("Source", "The component that reported the event, and where.", 1),
    Column("Message", "What happened, for people."),
    Column("First Seen", "How long ago the event first happened.", 1),
    Column("Count", "How often it happened.", 1),
    Column("Name", "The event's name.", 1, format="name"),
)


def _event_source(event: dict[str, Any]) -> str:
    source = _dict(event.get("source"))
    component = source.get("component") or event.get("reportingComponent") or ""
    host = source.get("host") or event.get("reportingInstance") or ""
    if component and host:
        return f"{component}, {host}"
    return str(component or host)


def event_cells(event: dict[str, Any], now: datetime) -> list[Any]:
    first_text = event.get("firstTimestamp") or event.get("eventTime")
    first = since(first_text, now)
    last = since(event["lastTimestamp"], now) if event.get("lastTimestamp") else first
    count = event.get("count") or 1
    series = _dict(event.get("series"))
    if series:
        last = since(series.get("lastObservedTime"), now)
        count = series.get("count") or count
    involved = _dict(event.get("involvedObject"))
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    return [
        last,
        event.get("type") or "",
        event.get("reason") or "",
        target,
        involved.get("fieldPath") or "",
        _event_source(event),
        str(event.get("message") or "").strip(),
        first,
        int(count),
        _name(event),
    ]


LEASE_COLUMNS = (NAME, Column("Holder", "Who holds the lease."), AGE)


DEFAULT_COLUMNS = (
    NAME,
    Column("Created At", "When the object was created.", type="date"),
)


def default_cells(obj: dict[str, Any], now: datetime) -> list[Any]:
    return [_name(obj), _dict(obj.get("metadata")).get("creationTimestamp") or ""]


PRINTERS: dict[str, tuple[tuple[Column, ...], Cells]] = {
    "Node": (NODE_COLUMNS, node_cells),
    "Pod": (POD_COLUMNS, pod_cells),
    "Namespace": (NAMESPACE_COLUMNS, name_value_age("status", "phase")),
    "Event": (EVENT_COLUMNS, event_cells),
    "Lease": (LEASE_COLUMNS, name_value_age("spec", "holderIdentity")),
}
