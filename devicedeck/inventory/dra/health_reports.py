"""DRA device health from the drivers' own health streams, as node agents read them.

A DRA driver may serve `v1alpha1.DRAResourceHealth/NodeWatchResources` on its plugin socket;
the kubelet is its usual client. A node agent that reads the stream posts each message as one
report: the driver's full list of devices on that node, each with HEALTHY, UNHEALTHY or
UNKNOWN, when the driver last checked it, its health-check timeout and a message.

A report is all or nothing. A device the driver names that no ResourceSlice publishes (yet) is
still recorded, and listed as unpublished in the answer: its slice may simply not have been
watched in yet. A device a slice publishes for another node is refused: an agent speaks for its
own node. Only a change of the stream's own value reaches the device's health, so a stream
repeating itself does not undo a newer report from the pod or claim status; a device the
stream stops naming keeps its last state (the kubelet's timeout for it is not modelled).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, StringConstraints, field_validator
from pydantic_core import PydanticCustomError
from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from devicedeck.inventory.cluster.models import DraDevice, DraHealthReport
from devicedeck.inventory.dra.health import MESSAGE_LIMIT, DeviceKey, set_health
from devicedeck.inventory.errors import InvalidInput, Problem
from devicedeck.inventory.events import EventLog
from devicedeck.inventory.fields import HEALTHY, UNHEALTHY, UNKNOWN
from devicedeck.inventory.schemas import (
    MAX_DEVICES_PER_SNAPSHOT,
    STORABLE,
    ObservedAt,
    Source,
    StorableText,
    _Input,
    check_node_name,
)
from devicedeck.kubelet import names

SOURCE = "kubelet_dra_health"
HEALTH_BY_STATUS = {"HEALTHY": HEALTHY, "UNHEALTHY": UNHEALTHY, "UNKNOWN": UNKNOWN}
# 9999-12-31T23:59:59Z: the latest second a stored time can hold.
MAX_UNIX_SECONDS = 253402300799
INT64_MAX = 2**63 - 1


def pool_name_problem(value: str) -> str | None:
    """resource.k8s.io pool names: DNS subdomains joined by '/', 253 characters at most."""
    if len(value) > names.DNS1123_SUBDOMAIN_MAX:
        return f"must be at most {names.DNS1123_SUBDOMAIN_MAX} characters"
    for part in value.split("/"):
        problem = names.dns1123_subdomain_problem(part)
        if problem:
            return f"each '/'-separated part {problem}"
    return None


class DeviceIdentifier(_Input):
    pool_name: StorableText = Field(validation_alias=AliasChoices("pool_name", "poolName"))
    device_name: StorableText = Field(validation_alias=AliasChoices("device_name", "deviceName"))

    @field_validator("pool_name")
    @classmethod
    def _check_pool(cls, value: str) -> str:
        problem = pool_name_problem(value)
        if problem:
            raise PydanticCustomError("pool_name", problem)
        return value

    @field_validator("device_name")
    @classmethod
    def _check_device(cls, value: str) -> str:
        problem = names.dns1123_label_problem(value)
        if problem:
            raise PydanticCustomError("dns1123_label", problem)
        return value


class DeviceHealthIn(_Input):
    """One DeviceHealth as proto3 JSON prints it (or with the proto's field names)."""

    device: DeviceIdentifier
    # proto3 JSON leaves the zero value out: no health is UNKNOWN.
    health: Literal["HEALTHY", "UNHEALTHY", "UNKNOWN"] = "UNKNOWN"
    # int64 arrives as a JSON string from protobuf's printer; both forms are taken.
    last_updated_time: int = Field(
        default=0,
        ge=0,
        le=MAX_UNIX_SECONDS,
        validation_alias=AliasChoices("last_updated_time", "lastUpdatedTime"),
    )
    health_check_timeout_seconds: int = Field(
        default=0,
        ge=-INT64_MAX - 1,
        le=INT64_MAX,
        validation_alias=AliasChoices("health_check_timeout_seconds", "healthCheckTimeoutSeconds"),
    )
    message: Annotated[str, StringConstraints(max_length=MESSAGE_LIMIT), STORABLE] = ""

    @property
    def key(self) -> tuple[str, str]:
        return self.device.pool_name, self.device.device_name


class DraHealthSnapshot(_Input):
    """One NodeWatchResourcesResponse of one driver on one node."""

    node: StorableText
    driver: StorableText
    # Accepted for the agents' common envelope; a report is a full state, so order matters
    # only within one agent, which sends them one at a time.
    source: Source | None = None
    observed_at: ObservedAt
    devices: list[DeviceHealthIn] = Field(max_length=MAX_DEVICES_PER_SNAPSHOT)

    _check_node = field_validator("node")(check_node_name)

    @field_validator("driver")
    @classmethod
    def _check_driver(cls, value: str) -> str:
        problem = names.dns1123_subdomain_problem(value)
        if problem:
            raise PydanticCustomError("dns1123_subdomain", problem)
        return value

    @field_validator("devices")
    @classmethod
    def _unique_devices(cls, devices: list[DeviceHealthIn]) -> list[DeviceHealthIn]:
        first: dict[tuple[str, str], int] = {}
        for index, device in enumerate(devices):
            if device.key in first:
                raise PydanticCustomError(
                    "unique",
                    "device {pool}/{device} at index {index} repeats the one at index {first}",
                    {
                        "pool": device.key[0],
                        "device": device.key[1],
                        "index": index,
                        "first": first[device.key],
                    },
                )
            first[device.key] = index
        return devices


@dataclass
class DraHealthResult:
    changed: bool = False
    devices: int = 0
    health_changes: int = 0
    # pool/device of the devices no ResourceSlice of the driver publishes.
    unpublished: list[str] = field(default_factory=list)


def _chunks(keys: list[tuple[str, str]], size: int = 500) -> list[list[tuple[str, str]]]:
    return [keys[i : i + size] for i in range(0, len(keys), size)]


def _published_nodes(
    session: Session, driver: str, keys: list[tuple[str, str]]
) -> dict[tuple[str, str], set[str | None]]:
    """For each published device of the driver, the nodes its slices give it (None: a device
    of no single node, published with a node selector or for all nodes)."""
    found: dict[tuple[str, str], set[str | None]] = {}
    for chunk in _chunks(keys):
        rows = session.execute(
            select(DraDevice.pool, DraDevice.device, DraDevice.node).where(
                DraDevice.driver == driver,
                tuple_(DraDevice.pool, DraDevice.device).in_(chunk),
            )
        )
        for pool, device, node in rows:
            found.setdefault((pool, device), set()).add(node)
    return found


def _reports(
    session: Session, driver: str, keys: list[tuple[str, str]]
) -> dict[tuple[str, str], DraHealthReport]:
    found = {}
    for chunk in _chunks(keys):
        for report in session.scalars(
            select(DraHealthReport).where(
                DraHealthReport.driver == driver,
                tuple_(DraHealthReport.pool, DraHealthReport.device).in_(chunk),
            )
        ):
            found[(report.pool, report.device)] = report
    return found


def _checked_at(seconds: int) -> datetime | None:
    return datetime.fromtimestamp(seconds, UTC) if seconds > 0 else None


def apply_dra_health_report(
    session: Session, snapshot: DraHealthSnapshot, *, actor: str, now: datetime
) -> DraHealthResult:
    keys = [d.key for d in snapshot.devices]
    published = _published_nodes(session, snapshot.driver, keys)
    problems = []
    for index, device in enumerate(snapshot.devices):
        nodes = published.get(device.key)
        if nodes and None not in nodes and snapshot.node not in nodes:
            problems.append(
                Problem(
                    f"devices[{index}].device",
                    "other_node",
                    f"{snapshot.driver} publishes {device.key[0]}/{device.key[1]} for node "
                    f"{', '.join(sorted(n for n in nodes if n))}, not {snapshot.node}",
                )
            )
    if problems:
        raise InvalidInput("the report names devices of another node", problems)

    reports = _reports(session, snapshot.driver, keys)
    log = EventLog(at=now, actor=actor)
    result = DraHealthResult(devices=len(keys))
    for device in snapshot.devices:
        pool, name = device.key
        key: DeviceKey = (snapshot.driver, pool, name)
        health = HEALTH_BY_STATUS[device.health]
        message = device.message or None
        checked_at = _checked_at(device.last_updated_time)
        timeout = device.health_check_timeout_seconds
        timeout_seconds = timeout if timeout > 0 else None
        if device.key not in published:
            result.unpublished.append(f"{pool}/{name}")
        report = reports.get(device.key)
        if report is None or report.health != health:
            set_health(
                session,
                key,
                health,
                raw=device.health,
                source=SOURCE,
                reported_by=snapshot.node,
                message=message,
                now=now,
                log=log,
                node=snapshot.node,
            )
        state = (snapshot.node, health, checked_at, timeout_seconds, message)
        if report is None:
            report = DraHealthReport(driver=snapshot.driver, pool=pool, device=name)
            session.add(report)
        elif (
            report.node,
            report.health,
            report.checked_at,
            report.timeout_seconds,
            report.message,
        ) == state:
            continue
        result.changed = True
        report.node, report.health, report.checked_at = state[0], state[1], state[2]
        report.timeout_seconds, report.message, report.received_at = state[3], state[4], now
    result.health_changes = log.count("dra_health_changed")
    log.write(session)
    return result
