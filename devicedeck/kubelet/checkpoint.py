"""Read and write the kubelet device manager checkpoint, device-plugins/kubelet_internal_checkpoint.

The file is Go encoding/json output, so the keys are Go field names. Two shapes exist:
kubelet >= 1.20 writes V2, where an entry's DeviceIDs maps a NUMA node id (a JSON string
key, "-1" for devices without topology) to device ids; older kubelets wrote V1, a plain
array, which the kubelet itself reads as NUMA node 0. AllocResp is the base64 of one
protobuf ContainerAllocateResponse. The Checksum is a hash over a Go-specific dump of
the data that cannot practically be reproduced here, so it is parsed and ignored.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from devicedeck.kubelet.proto import deviceplugin_pb2

log = logging.getLogger(__name__)

NO_TOPOLOGY_NUMA_NODE = -1


class CheckpointError(ValueError):
    """The checkpoint file is missing, unreadable or not in a shape the kubelet writes."""


@dataclass(frozen=True)
class MountSpec:
    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True)
class DeviceNodeSpec:
    container_path: str
    host_path: str
    permissions: str = ""


@dataclass(frozen=True)
class ContainerAllocation:
    """What a device plugin's Allocate told the kubelet to give one container."""

    envs: dict[str, str] = field(default_factory=dict)
    mounts: list[MountSpec] = field(default_factory=list)
    devices: list[DeviceNodeSpec] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: list[str] = field(default_factory=list)

    @classmethod
    def from_proto(cls, resp: deviceplugin_pb2.ContainerAllocateResponse) -> ContainerAllocation:
        return cls(
            envs=dict(resp.envs),
            mounts=[MountSpec(m.container_path, m.host_path, m.read_only) for m in resp.mounts],
            devices=[
                DeviceNodeSpec(d.container_path, d.host_path, d.permissions) for d in resp.devices
            ],
            annotations=dict(resp.annotations),
            cdi_devices=[c.name for c in resp.cdi_devices],
        )

    def to_proto(self) -> deviceplugin_pb2.ContainerAllocateResponse:
        return deviceplugin_pb2.ContainerAllocateResponse(
            envs=self.envs,
            mounts=[
                deviceplugin_pb2.Mount(
                    container_path=m.container_path, host_path=m.host_path, read_only=m.read_only
                )
                for m in self.mounts
            ],
            devices=[
                deviceplugin_pb2.DeviceSpec(
                    container_path=d.container_path,
                    host_path=d.host_path,
                    permissions=d.permissions,
                )
                for d in self.devices
            ],
            annotations=self.annotations,
            cdi_devices=[deviceplugin_pb2.CDIDevice(name=n) for n in self.cdi_devices],
        )


@dataclass(frozen=True)
class PodDeviceEntry:
    """Devices of one resource held by one container of one pod (no pod name in the file)."""

    pod_uid: str
    container_name: str
    resource_name: str
    # NUMA node id -> device ids; NO_TOPOLOGY_NUMA_NODE for devices without topology.
    device_ids: dict[int, list[str]] = field(default_factory=dict)
    allocation: ContainerAllocation = field(default_factory=ContainerAllocation)

    def all_device_ids(self) -> list[str]:
        """Every device id once, in NUMA-node order (a device may sit on several nodes)."""
        seen: dict[str, None] = {}
        for numa in sorted(self.device_ids):
            for device_id in self.device_ids[numa]:
                seen.setdefault(device_id, None)
        return list(seen)


@dataclass(frozen=True)
class Checkpoint:
    entries: list[PodDeviceEntry] = field(default_factory=list)
    # Resource name -> the devices that were healthy when the kubelet wrote the file.
    registered_devices: dict[str, list[str]] = field(default_factory=dict)
    checksum: int | None = None
    boot_id: str | None = None
    # 1 when any entry used the pre-1.20 array form of DeviceIDs, else 2.
    format_version: int = 2


def decode_alloc_resp(encoded: str | None) -> ContainerAllocation:
    """Decode an AllocResp value: base64 (standard alphabet) of a ContainerAllocateResponse."""
    if not encoded:
        return ContainerAllocation()
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as e:
        raise CheckpointError(f"AllocResp is not valid base64: {e}") from e
    resp = deviceplugin_pb2.ContainerAllocateResponse()
    try:
        resp.ParseFromString(raw)
    except DecodeError as e:
        raise CheckpointError(f"AllocResp is not a ContainerAllocateResponse: {e}") from e
    return ContainerAllocation.from_proto(resp)


def encode_alloc_resp(allocation: ContainerAllocation) -> str:
    return base64.b64encode(allocation.to_proto().SerializeToString()).decode("ascii")


def _expect(value: Any, kind: type | tuple[type, ...], where: str, what: str) -> Any:
    if not isinstance(value, kind):
        raise CheckpointError(f"{where}: expected {what}, got {type(value).__name__}")
    return value


def _string_list(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    items = _expect(value, list, where, "an array of strings")
    for i, item in enumerate(items):
        _expect(item, str, f"{where}[{i}]", "a string")
    return list(items)


def _parse_device_ids(value: Any, where: str) -> tuple[dict[int, list[str]], bool]:
    """Return the NUMA map and whether the entry used the V1 (plain array) form."""
    if value is None:
        return {}, False
    if isinstance(value, list):
        # V1: the kubelet maps every id of an old checkpoint to NUMA node 0.
        return {0: _string_list(value, where)}, True
    mapping = _expect(value, dict, where, "an object of NUMA node -> device ids, or an array")
    numa_map: dict[int, list[str]] = {}
    for key, ids in mapping.items():
        try:
            numa = int(key)
        except ValueError as e:
            raise CheckpointError(f"{where}: NUMA node key {key!r} is not an integer") from e
        numa_map[numa] = _string_list(ids, f"{where}[{key!r}]")
    return numa_map, False


def _parse_entry(raw: Any, where: str) -> tuple[PodDeviceEntry, bool]:
    entry = _expect(raw, dict, where, "an object")
    fields: dict[str, str] = {}
    for key in ("PodUID", "ContainerName", "ResourceName"):
        fields[key] = _expect(entry.get(key, ""), str, f"{where}.{key}", "a string")
    device_ids, is_v1 = _parse_device_ids(entry.get("DeviceIDs"), f"{where}.DeviceIDs")
    alloc_resp = _expect(entry.get("AllocResp"), (str, type(None)), f"{where}.AllocResp", "base64")
    try:
        allocation = decode_alloc_resp(alloc_resp)
    except CheckpointError as e:
        raise CheckpointError(f"{where}.{e}") from e
    return (
        PodDeviceEntry(
            pod_uid=fields["PodUID"],
            container_name=fields["ContainerName"],
            resource_name=fields["ResourceName"],
            device_ids=device_ids,
            allocation=allocation,
        ),
        is_v1,
    )


def parse_checkpoint(text: str | bytes) -> Checkpoint:
    """Parse the checkpoint JSON (either shape); raise CheckpointError naming the bad part."""
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint is not valid JSON: {e}") from e
    _expect(doc, dict, "checkpoint", "a JSON object")
    if "Data" not in doc:
        raise CheckpointError("checkpoint: missing the Data object")
    data = _expect(doc["Data"], dict, "Data", "an object")

    entries: list[PodDeviceEntry] = []
    any_v1 = False
    raw_entries = data.get("PodDeviceEntries")
    if raw_entries is not None:
        _expect(raw_entries, list, "Data.PodDeviceEntries", "an array")
        for i, raw in enumerate(raw_entries):
            if raw is None:
                continue
            entry, is_v1 = _parse_entry(raw, f"Data.PodDeviceEntries[{i}]")
            entries.append(entry)
            any_v1 = any_v1 or is_v1

    registered: dict[str, list[str]] = {}
    raw_registered = data.get("RegisteredDevices")
    if raw_registered is not None:
        _expect(raw_registered, dict, "Data.RegisteredDevices", "an object")
        for resource, ids in raw_registered.items():
            registered[resource] = _string_list(ids, f"Data.RegisteredDevices[{resource!r}]")

    checksum = doc.get("Checksum")
    if checksum is not None and (isinstance(checksum, bool) or not isinstance(checksum, int)):
        raise CheckpointError(f"Checksum: expected an integer, got {type(checksum).__name__}")
    boot_id = _expect(doc.get("BootID"), (str, type(None)), "BootID", "a string")
    return Checkpoint(
        entries=entries,
        registered_devices=registered,
        checksum=checksum,
        boot_id=boot_id or None,
        format_version=1 if any_v1 else 2,
    )


def read_checkpoint(path: Path | str) -> Checkpoint:
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e.strerror or e}") from e
    try:
        return parse_checkpoint(raw)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from e


def _fnv32a(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def checkpoint_document(
    entries: Iterable[PodDeviceEntry],
    registered_devices: Mapping[str, Iterable[str]],
    *,
    boot_id: str | None = None,
) -> dict[str, Any]:
    """The V2 JSON document the kubelet writes, as a dict (key order as the kubelet's)."""
    pod_entries = [
        {
            "PodUID": e.pod_uid,
            "ContainerName": e.container_name,
            "ResourceName": e.resource_name,
            # Go sorts map keys as strings: "-1" < "0" < "1" < "10" < "2".
            "DeviceIDs": {str(n): list(e.device_ids[n]) for n in sorted(e.device_ids, key=str)},
            "AllocResp": encode_alloc_resp(e.allocation),
        }
        for e in entries
    ]
    data = {
        # A nil Go slice marshals as null; the kubelet's file has null when no pod holds devices.
        "PodDeviceEntries": pod_entries or None,
        "RegisteredDevices": {r: list(registered_devices[r]) for r in sorted(registered_devices)},
    }
    # Not the kubelet's checksum (that hashes a Go value dump); a stable FNV-32a of the
    # data so the field has the kubelet's type. Readers, ours included, ignore it.
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    doc: dict[str, Any] = {"Data": data, "Checksum": _fnv32a(canonical)}
    if boot_id:
        doc["BootID"] = boot_id
    return doc


def write_checkpoint(
    path: Path | str,
    entries: Iterable[PodDeviceEntry],
    registered_devices: Mapping[str, Iterable[str]],
    *,
    boot_id: str | None = None,
) -> None:
    """Write the checkpoint the way the kubelet does: a '.'-prefixed temp file in the same
    directory, fsync, then rename over the target, so readers never see a partial file."""
    target = Path(path)
    doc = checkpoint_document(entries, registered_devices, boot_id=boot_id)
    payload = json.dumps(doc, separators=(",", ":")).encode()
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix="." + target.name, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(payload)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    log.debug(
        "checkpoint written",
        extra={"event": "checkpoint_written", "path": target, "bytes": len(payload)},
    )
