"""Snapshot shapes as the agent (or grpcurl) posts them: the kubelet's proto3-JSON names.

Both the JSON names protobuf prints (camelCase) and the proto field names (snake_case) are
accepted, so `grpcurl ... v1.PodResourcesLister/List` output can be posted as it is. Fields
the kubelet adds that Devicedeck does not use (cpuIds, memory) are ignored.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Protocol

from pydantic import (
    AfterValidator,
    AliasChoices,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
)
from pydantic_core import PydanticCustomError, PydanticSerializationError, to_json

from devicedeck.inventory.errors import InvalidInput, Problem
from devicedeck.kubelet import names

MAX_DEVICES_PER_SNAPSHOT = 4096
MAX_PODS_PER_SNAPSHOT = 4096
MAX_CONTAINERS_PER_POD = 64
MAX_NUMA_ID = 4095
MAX_SEQ = 2**63 - 1


def _alias(snake: str, camel: str) -> Any:
    return Field(default_factory=list, validation_alias=AliasChoices(snake, camel))


def _check(problem: str | None, rule: str) -> None:
    if problem:
        raise PydanticCustomError(rule, problem)


def check_node_name(value: str) -> str:
    _check(names.dns1123_subdomain_problem(value), "dns1123_subdomain")
    return value


def check_resource_name(value: str) -> str:
    _check(names.extended_resource_name_problem(value), "extended_resource_name")
    return value


def check_namespace(value: str) -> str:
    _check(names.dns1123_label_problem(value), "dns1123_label")
    return value


def check_device_id(value: str) -> str:
    _check(names.device_id_problem(value), "device_id")
    return value


def check_utc_range(value: datetime) -> datetime:
    """A time that exists in UTC: 0001-01-01T00:00+01:00 does not, and could not be stored."""
    try:
        value.astimezone(UTC)
    except OverflowError as e:
        raise PydanticCustomError(
            "datetime_range", "must be a time between years 1 and 9999 in UTC"
        ) from e
    return value


ObservedAt = Annotated[AwareDatetime, AfterValidator(check_utc_range)]


def check_storable_text(value: str) -> str:
    """Text the database can hold: no NUL, no lone UTF-16 surrogate."""
    if value.isascii() and "\x00" not in value:
        return value
    if "\x00" in value:
        raise PydanticCustomError("no_nul", "must not contain NUL characters")
    _check(names.text_problem(value), "utf8")
    return value


STORABLE = AfterValidator(check_storable_text)
StorableText = Annotated[str, STORABLE]


class _Input(BaseModel):
    """A snapshot part. Every str field is StorableText, or carries STORABLE next to its limits: the
    database cannot hold NUL or a lone surrogate, and these are refused here rather than failing
    mid-transaction (a test checks that no str field goes without). The check sits in the
    field's type rather than in one validator for every field, which cost a Python call per
    field of every object, numbers and lists included."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class Source(_Input):
    """Where a snapshot comes from: one boot of one sender, and its place in that sequence."""

    boot_id: Annotated[str, StringConstraints(min_length=1, max_length=128), STORABLE] = Field(
        validation_alias=AliasChoices("boot_id", "bootId")
    )
    seq: int = Field(ge=0, le=MAX_SEQ)
    # When the sender's boot began: a snapshot of a boot that began before the one the stream
    # last applied is late. Optional, for agents that do not send it.
    boot_started_at: ObservedAt | None = Field(
        default=None, validation_alias=AliasChoices("boot_started_at", "bootStartedAt")
    )

    @field_validator("boot_id")
    @classmethod
    def _printable_boot_id(cls, value: str) -> str:
        _check(names.unprintable_problem(value), "printable")
        return value


class NUMANode(_Input):
    # proto3 JSON leaves zero values out, so NUMA node 0 arrives as {}.
    ID: int = Field(default=0, ge=0, le=MAX_NUMA_ID)


class TopologyInfo(_Input):
    nodes: list[NUMANode] = Field(default_factory=list, max_length=MAX_NUMA_ID + 1)

    def numa_ids(self) -> list[int]:
        nodes = self.nodes
        if len(nodes) == 1:  # the common case, with no set to build and sort
            return [nodes[0].ID]
        return sorted({n.ID for n in nodes})


class PluginDevice(_Input):
    ID: StorableText
    health: Annotated[str, StringConstraints(max_length=64), STORABLE] = ""
    topology: TopologyInfo | None = None

    _check_id = field_validator("ID")(check_device_id)


class PluginOptions(_Input):
    pre_start_required: bool = Field(
        default=False, validation_alias=AliasChoices("pre_start_required", "preStartRequired")
    )
    get_preferred_allocation_available: bool = Field(
        default=False,
        validation_alias=AliasChoices(
            "get_preferred_allocation_available", "getPreferredAllocationAvailable"
        ),
    )


class PluginInfo(_Input):
    endpoint: Annotated[str, StringConstraints(max_length=512), STORABLE] | None = None
    version: Annotated[str, StringConstraints(max_length=32), STORABLE] | None = None
    options: PluginOptions | None = None


class Placed(Protocol):
    """What places a snapshot in its stream: all the unchanged-snapshot statement reads of it."""

    @property
    def node(self) -> str: ...

    @property
    def source(self) -> Source: ...

    @property
    def observed_at(self) -> datetime: ...


# The keys of a posted snapshot that change on every send, its content unchanged or not.
PLACE_KEYS = frozenset({"source", "observed_at"})


class SnapshotPlace(_Input):
    """A posted snapshot's source and observed_at, by the rules the whole snapshot has: all of
    it that needs checking when the rest is a body already validated (`repeat_digest`).
    The node is the one of the body already validated, which the digest covers."""

    node: StorableText
    source: Source
    observed_at: ObservedAt


class ListAndWatchPlace(SnapshotPlace):
    """A ListAndWatch snapshot's place, in the stream of its resource."""

    resource: StorableText


def repeat_digest(body: dict[str, Any]) -> bytes | None:
    """A digest of a posted snapshot's parsed JSON without its source and observed_at: two
    bodies with the same digest validate alike, and have the same content hash. None for a
    body with text no snapshot can hold (a lone surrogate).

    Key order counts, so the same content sent in another order is only a miss. Serialised by
    pydantic-core, at a quarter of the CPU the standard library's encoder takes."""
    rest = {key: value for key, value in body.items() if key not in PLACE_KEYS}
    try:
        encoded = to_json(rest)
    except PydanticSerializationError:
        return None
    return hashlib.sha256(encoded).digest()


def _canonical_hash(content: Any) -> str:
    encoded = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(encoded.encode()).hexdigest()


def _sorted_content_hash(content: Any) -> str:
    """`_canonical_hash` of content of JSON types whose every object has its keys in sorted
    order already. Serialised by pydantic-core, at a fraction of the standard library's CPU:
    the same bytes while they are printable ASCII, which is every ordinary snapshot; the
    standard library escapes the rest (any other character, and DEL) as \\u sequences that
    pydantic-core does not write, so such content takes `_canonical_hash`."""
    encoded = to_json(content)
    if encoded.isascii() and b"\x7f" not in encoded:
        return hashlib.sha256(encoded).hexdigest()
    return _canonical_hash(content)


def _with_sorted_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _with_sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_with_sorted_keys(item) for item in value]
    return value


class ListAndWatchSnapshot(_Input):
    """One ListAndWatchResponse for one (node, resource), with where it came from."""

    node: StorableText
    resource: StorableText
    source: Source
    observed_at: ObservedAt
    plugin: PluginInfo | None = None
    health_source: Literal["plugin", "derived"] = "plugin"
    devices: list[PluginDevice] = Field(max_length=MAX_DEVICES_PER_SNAPSHOT)

    _check_node = field_validator("node")(check_node_name)
    _check_resource = field_validator("resource")(check_resource_name)

    @field_validator("devices")
    @classmethod
    def _unique_ids(cls, devices: list[PluginDevice]) -> list[PluginDevice]:
        first_index: dict[str, int] = {}
        for index, device in enumerate(devices):
            if device.ID in first_index:
                raise PydanticCustomError(
                    "unique",
                    "device ID {id!r} at index {index} repeats the one at index {first}",
                    {"id": device.ID, "index": index, "first": first_index[device.ID]},
                )
            first_index[device.ID] = index
        return devices

    def content_hash(self) -> str:
        # The keys in sorted order, as `_sorted_content_hash` needs.
        return _sorted_content_hash(
            {
                "devices": sorted(
                    (d.ID, d.health, d.topology.numa_ids() if d.topology else [])
                    for d in self.devices
                ),
                "health_source": self.health_source,
                "plugin": _with_sorted_keys(self.plugin.model_dump()) if self.plugin else None,
            }
        )


DeviceId = Annotated[str, AfterValidator(check_device_id)]


class ContainerDevices(_Input):
    resource_name: StorableText = Field(
        validation_alias=AliasChoices("resource_name", "resourceName")
    )
    # Checked one by one so an error names the index of the bad ID.
    device_ids: list[DeviceId] = _alias("device_ids", "deviceIds")
    topology: TopologyInfo | None = None

    _check_resource = field_validator("resource_name")(check_resource_name)


class CDIDevice(_Input):
    name: Annotated[str, StringConstraints(max_length=512), STORABLE]


class ClaimResource(_Input):
    cdi_devices: list[CDIDevice] = _alias("cdi_devices", "cdiDevices")
    driver_name: Annotated[str, StringConstraints(min_length=1, max_length=253), STORABLE] = Field(
        validation_alias=AliasChoices("driver_name", "driverName")
    )
    pool_name: Annotated[str, StringConstraints(min_length=1, max_length=253), STORABLE] = Field(
        validation_alias=AliasChoices("pool_name", "poolName")
    )
    device_name: Annotated[str, StringConstraints(min_length=1, max_length=253), STORABLE] = Field(
        validation_alias=AliasChoices("device_name", "deviceName")
    )
    share_id: Annotated[str, StringConstraints(max_length=253), STORABLE] | None = Field(
        default=None, validation_alias=AliasChoices("share_id", "shareId")
    )


class DynamicResource(_Input):
    claim_name: Annotated[str, StringConstraints(min_length=1, max_length=253), STORABLE] = Field(
        validation_alias=AliasChoices("claim_name", "claimName")
    )
    claim_namespace: StorableText = Field(
        validation_alias=AliasChoices("claim_namespace", "claimNamespace")
    )
    claim_resources: list[ClaimResource] = _alias("claim_resources", "claimResources")

    _check_namespace = field_validator("claim_namespace")(check_namespace)


class ContainerResources(_Input):
    name: StorableText
    devices: list[ContainerDevices] = Field(
        default_factory=list, max_length=MAX_DEVICES_PER_SNAPSHOT
    )
    dynamic_resources: list[DynamicResource] = _alias("dynamic_resources", "dynamicResources")

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        _check(names.dns1123_label_problem(value), "dns1123_label")
        return value


class PodResources(_Input):
    name: StorableText
    namespace: StorableText
    # Not in the kubelet's message; the agent adds it from the checkpoint when it can.
    uid: Annotated[str, StringConstraints(max_length=64), STORABLE] | None = None
    containers: list[ContainerResources] = Field(
        default_factory=list, max_length=MAX_CONTAINERS_PER_POD
    )

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        _check(names.pod_name_problem(value), "dns1123_subdomain")
        return value

    _check_namespace = field_validator("namespace")(check_namespace)

    @field_validator("containers")
    @classmethod
    def _unique_containers(cls, containers: list[ContainerResources]) -> list[ContainerResources]:
        seen: set[str] = set()
        for container in containers:
            if container.name in seen:
                raise PydanticCustomError(
                    "unique", "container name {name!r} repeats", {"name": container.name}
                )
            seen.add(container.name)
        return containers


class AllocatableResources(_Input):
    devices: list[ContainerDevices] = Field(
        default_factory=list, max_length=MAX_DEVICES_PER_SNAPSHOT * 4
    )


class PodResourcesSnapshot(_Input):
    """One ListPodResourcesResponse for a node, optionally with its allocatable devices."""

    node: StorableText
    source: Source
    observed_at: ObservedAt
    pod_resources: list[PodResources] = Field(
        default_factory=list,
        max_length=MAX_PODS_PER_SNAPSHOT,
        validation_alias=AliasChoices("pod_resources", "podResources"),
    )
    allocatable: AllocatableResources | None = None

    _check_node = field_validator("node")(check_node_name)

    @field_validator("pod_resources")
    @classmethod
    def _unique_pods(cls, pods: list[PodResources]) -> list[PodResources]:
        seen: dict[tuple[str, str], int] = {}
        for index, pod in enumerate(pods):
            key = (pod.namespace, pod.name)
            if key in seen:
                raise PydanticCustomError(
                    "unique",
                    "pod_resources[{index}]: pod {ns}/{name} repeats pod_resources[{first}]",
                    {"index": index, "ns": pod.namespace, "name": pod.name, "first": seen[key]},
                )
            seen[key] = index
        return pods

    @field_validator("pod_resources")
    @classmethod
    def _each_device_held_once(cls, pods: list[PodResources]) -> list[PodResources]:
        # The kubelet hands a device to one container; the same ID under two containers is a
        # forged or corrupt snapshot. Under one container it may repeat, once per NUMA node.
        holders: dict[tuple[str, str], tuple[str, str, str]] = {}
        for p, pod in enumerate(pods):
            for c, container in enumerate(pod.containers):
                holder = (pod.namespace, pod.name, container.name)
                for d, entry in enumerate(container.devices):
                    for i, device_id in enumerate(entry.device_ids):
                        first = holders.setdefault((entry.resource_name, device_id), holder)
                        if first != holder:
                            raise PydanticCustomError(
                                "allocated_once",
                                "pod_resources[{p}].containers[{c}].devices[{d}].device_ids[{i}]:"
                                " {resource} device {id!r} is also held by {other}",
                                {
                                    "p": p,
                                    "c": c,
                                    "d": d,
                                    "i": i,
                                    "resource": entry.resource_name,
                                    "id": device_id,
                                    "other": "{}/{} container {}".format(*first),
                                },
                            )
        return pods

    def device_entries(self) -> int:
        """Device IDs the snapshot lists, counting each NUMA repeat: what its size is bounded by."""
        return sum(
            len(entry.device_ids)
            for pod in self.pod_resources
            for container in pod.containers
            for entry in container.devices
        )

    def allocatable_entries(self) -> int:
        """Device IDs the allocatable list holds, counting each NUMA repeat."""
        if self.allocatable is None:
            return 0
        return sum(len(entry.device_ids) for entry in self.allocatable.devices)

    def content_hash(self) -> str:
        return _sorted_content_hash(
            {
                "allocatable": (
                    {"devices": [devices_content(d) for d in self.allocatable.devices]}
                    if self.allocatable
                    else None
                ),
                "pods": sorted(
                    (p.namespace, p.name, p.uid, [container_content(c) for c in p.containers])
                    for p in self.pod_resources
                ),
            }
        )


# What model_dump() gives, built directly: model_dump costs more than the rest of an unchanged
# snapshot's hash. The content must stay exactly model_dump's, or every stored hash would stop
# matching (a test compares them); its keys are in sorted order, as `_sorted_content_hash`
# needs.
def devices_content(entry: ContainerDevices) -> dict[str, Any]:
    topology = entry.topology
    return {
        "device_ids": list(entry.device_ids),
        "resource_name": entry.resource_name,
        "topology": None if topology is None else {"nodes": [{"ID": n.ID} for n in topology.nodes]},
    }


def container_content(container: ContainerResources) -> dict[str, Any]:
    return {
        "devices": [devices_content(d) for d in container.devices],
        "dynamic_resources": [
            _with_sorted_keys(r.model_dump()) for r in container.dynamic_resources
        ],
        "name": container.name,
    }


def _too_long(field: str, limit: int, what: str, actual: int) -> Problem:
    return Problem(field, "too_long", f"must list at most {limit} {what}, not {actual}")


def check_snapshot_size(
    snapshot: ListAndWatchSnapshot | PodResourcesSnapshot, *, max_devices: int, max_pods: int
) -> None:
    """The configured snapshot size limits (the schema itself only has hard upper bounds)."""
    problems: list[Problem] = []
    if isinstance(snapshot, ListAndWatchSnapshot):
        if len(snapshot.devices) > max_devices:
            problems.append(_too_long("devices", max_devices, "devices", len(snapshot.devices)))
    else:
        if len(snapshot.pod_resources) > max_pods:
            problems.append(
                _too_long("pod_resources", max_pods, "pods", len(snapshot.pod_resources))
            )
        entries = snapshot.device_entries()
        if entries > max_devices:
            problems.append(_too_long("pod_resources", max_devices, "device IDs", entries))
        allocatable = snapshot.allocatable_entries()
        if allocatable > max_devices:
            problems.append(_too_long("allocatable", max_devices, "device IDs", allocatable))
    if problems:
        raise InvalidInput("snapshot is over the size limit", problems)
