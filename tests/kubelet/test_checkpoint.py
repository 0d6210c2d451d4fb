"""The kubelet_internal_checkpoint reader and writer."""

from __future__ import annotations

import base64
import json
import os
import threading
from pathlib import Path

import pytest

from devicedeck.kubelet.checkpoint import (
    NO_TOPOLOGY_NUMA_NODE,
    CheckpointError,
    ContainerAllocation,
    DeviceNodeSpec,
    MountSpec,
    PodDeviceEntry,
    checkpoint_document,
    decode_alloc_resp,
    parse_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from devicedeck.kubelet.proto import deviceplugin_pb2


def gpu_alloc_resp() -> str:
    response = deviceplugin_pb2.ContainerAllocateResponse(
        envs={"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"},
        annotations={"example.com/owner": "team-a"},
    )
    response.devices.add(
        container_path="/dev/nvidiactl", host_path="/dev/nvidiactl", permissions="rw"
    )
    response.devices.add(
        container_path="/dev/nvidia-uvm", host_path="/dev/nvidia-uvm", permissions="rw"
    )
    response.mounts.add(container_path="/usr/lib/nv", host_path="/run/nv/lib", read_only=True)
    response.cdi_devices.add(name="nvidia.com/gpu=GPU-a")
    return base64.b64encode(response.SerializeToString()).decode()


def v2_document() -> dict[str, object]:
    return {
        "Data": {
            "PodDeviceEntries": [
                {
                    "PodUID": "bf52-85c3",
                    "ContainerName": "check",
                    "ResourceName": "nvidia.com/gpu",
                    "DeviceIDs": {"-1": ["tegra"]},
                    "AllocResp": base64.b64encode(
                        deviceplugin_pb2.ContainerAllocateResponse(
                            envs={"NVIDIA_VISIBLE_DEVICES": "tegra"}
                        ).SerializeToString()
                    ).decode(),
                },
                {
                    "PodUID": "c1e9",
                    "ContainerName": "train",
                    "ResourceName": "nvidia.com/gpu",
                    "DeviceIDs": {"1": ["GPU-a", "GPU-b"], "0": ["GPU-a"]},
                    "AllocResp": gpu_alloc_resp(),
                },
            ],
            "RegisteredDevices": {"nvidia.com/gpu": ["tegra", "GPU-a", "GPU-b"]},
        },
        "Checksum": 3660592824,
    }


def test_reads_the_v2_shape() -> None:
    checkpoint = parse_checkpoint(json.dumps(v2_document()))
    assert checkpoint.format_version == 2
    assert checkpoint.checksum == 3660592824
    assert checkpoint.boot_id is None
    tegra, train = checkpoint.entries
    assert tegra.device_ids == {NO_TOPOLOGY_NUMA_NODE: ["tegra"]}
    assert tegra.allocation.envs == {"NVIDIA_VISIBLE_DEVICES": "tegra"}
    assert train.pod_uid == "c1e9" and train.container_name == "train"
    assert train.device_ids == {0: ["GPU-a"], 1: ["GPU-a", "GPU-b"]}
    assert train.all_device_ids() == ["GPU-a", "GPU-b"]
    assert checkpoint.registered_devices == {"nvidia.com/gpu": ["tegra", "GPU-a", "GPU-b"]}


def test_decodes_alloc_resp_into_plain_values() -> None:
    allocation = decode_alloc_resp(gpu_alloc_resp())
    assert allocation == ContainerAllocation(
        envs={"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"},
        mounts=[MountSpec("/usr/lib/nv", "/run/nv/lib", True)],
        devices=[
            DeviceNodeSpec("/dev/nvidiactl", "/dev/nvidiactl", "rw"),
            DeviceNodeSpec("/dev/nvidia-uvm", "/dev/nvidia-uvm", "rw"),
        ],
        annotations={"example.com/owner": "team-a"},
        cdi_devices=["nvidia.com/gpu=GPU-a"],
    )


def test_reads_the_v1_array_shape_as_numa_zero() -> None:
    doc = {
        "Data": {
            "PodDeviceEntries": [
                {
                    "PodUID": "u1",
                    "ContainerName": "c",
                    "ResourceName": "example.com/dongle",
                    "DeviceIDs": ["dongle-0", "dongle-1"],
                    "AllocResp": "",
                }
            ],
            "RegisteredDevices": {"example.com/dongle": ["dongle-0"]},
        },
        "Checksum": 1,
    }
    checkpoint = parse_checkpoint(json.dumps(doc))
    assert checkpoint.format_version == 1
    assert checkpoint.entries[0].device_ids == {0: ["dongle-0", "dongle-1"]}
    assert checkpoint.entries[0].allocation == ContainerAllocation()


def test_tolerates_nulls_and_reads_boot_id() -> None:
    doc = {
        "Data": {
            "PodDeviceEntries": [
                None,
                {
                    "PodUID": "u",
                    "ContainerName": "c",
                    "ResourceName": "example.com/dongle",
                    "DeviceIDs": None,
                    "AllocResp": None,
                },
            ],
            "RegisteredDevices": {"example.com/dongle": None},
        },
        "Checksum": 7,
        "BootID": "3f1c-boot",
    }
    checkpoint = parse_checkpoint(json.dumps(doc))
    assert checkpoint.boot_id == "3f1c-boot"
    assert [e.device_ids for e in checkpoint.entries] == [{}]
    assert checkpoint.registered_devices == {"example.com/dongle": []}
    empty = parse_checkpoint(
        '{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":0}'
    )
    assert empty.entries == [] and empty.registered_devices == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not valid JSON"),
        ("[]", "checkpoint: expected a JSON object"),
        ('{"Checksum": 1}', "missing the Data object"),
        ('{"Data": {"PodDeviceEntries": {}}}', "Data.PodDeviceEntries: expected an array"),
        (
            '{"Data": {"PodDeviceEntries": [{"DeviceIDs": "x"}]}}',
            "Data.PodDeviceEntries[0].DeviceIDs: expected an object",
        ),
        (
            '{"Data": {"PodDeviceEntries": [{"DeviceIDs": {"zero": []}}]}}',
            "NUMA node key 'zero' is not an integer",
        ),
        (
            '{"Data": {"PodDeviceEntries": [{"AllocResp": "%%%"}]}}',
            "Data.PodDeviceEntries[0].AllocResp is not valid base64",
        ),
        (
            '{"Data": {"PodDeviceEntries": [{"AllocResp": "/w=="}]}}',
            "AllocResp is not a ContainerAllocateResponse",
        ),
        ('{"Data": {}, "Checksum": "12"}', "Checksum: expected an integer"),
    ],
)
def test_bad_files_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(CheckpointError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_checkpoint(text)


def test_read_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        read_checkpoint(tmp_path / "missing")
    bad = tmp_path / "kubelet_internal_checkpoint"
    bad.write_text("{")
    with pytest.raises(CheckpointError, match=str(bad)):
        read_checkpoint(bad)


def sample_entries() -> list[PodDeviceEntry]:
    return [
        PodDeviceEntry(
            pod_uid="uid-1",
            container_name="main",
            resource_name="example.com/gpu",
            device_ids={1: ["GPU-b"], -1: ["GPU-x"], 0: ["GPU-a"], 10: ["GPU-z"]},
            allocation=ContainerAllocation(
                envs={"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"},
                devices=[DeviceNodeSpec("/dev/nvidia0", "/dev/nvidia0", "rw")],
                mounts=[MountSpec("/lib/nv", "/run/nv", True)],
                cdi_devices=["example.com/gpu=GPU-a"],
            ),
        )
    ]


def test_writer_round_trips_in_the_kubelet_shape(tmp_path: Path) -> None:
    path = tmp_path / "device-plugins" / "kubelet_internal_checkpoint"
    registered = {"example.com/gpu": ["GPU-a", "GPU-b"], "example.com/dongle": []}
    write_checkpoint(path, sample_entries(), registered, boot_id="boot-1")
    raw = json.loads(path.read_text())
    assert list(raw) == ["Data", "Checksum", "BootID"]
    assert list(raw["Data"]) == ["PodDeviceEntries", "RegisteredDevices"]
    entry = raw["Data"]["PodDeviceEntries"][0]
    assert list(entry) == ["PodUID", "ContainerName", "ResourceName", "DeviceIDs", "AllocResp"]
    # Go orders map keys as strings.
    assert list(entry["DeviceIDs"]) == ["-1", "0", "1", "10"]
    assert isinstance(raw["Checksum"], int)

    checkpoint = read_checkpoint(path)
    assert checkpoint.entries == sample_entries()
    assert checkpoint.registered_devices == registered
    assert checkpoint.boot_id == "boot-1"
    assert checkpoint.format_version == 2

    write_checkpoint(path, [], {})
    raw = json.loads(path.read_text())
    assert raw["Data"]["PodDeviceEntries"] is None
    assert "BootID" not in raw


def test_writer_is_atomic(tmp_path: Path) -> None:
    """A reader polling the file during many rewrites only ever sees complete documents,
    and the only other names that ever appear are the writer's '.'-prefixed temp files."""
    path = tmp_path / "kubelet_internal_checkpoint"
    write_checkpoint(path, [], {})
    big = [
        PodDeviceEntry(f"uid-{i}", "c", "example.com/dongle", {0: [f"d-{i}"] * 50})
        for i in range(200)
    ]
    done = threading.Event()
    seen_names: set[str] = set()
    failures: list[str] = []

    def reader() -> None:
        while not done.is_set():
            seen_names.update(os.listdir(tmp_path))
            try:
                read_checkpoint(path)
            except CheckpointError as e:
                failures.append(str(e))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(30):
            write_checkpoint(path, big if i % 2 else [], {"example.com/dongle": ["d-0"]})
    finally:
        done.set()
        thread.join()
    assert failures == []
    assert all(n == path.name or n.startswith("." + path.name) for n in seen_names)
    assert os.listdir(tmp_path) == [path.name]


def test_writer_leaves_nothing_behind_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "kubelet_internal_checkpoint"
    write_checkpoint(path, [], {"r/x": ["a"]})

    def failing_replace(src: str, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        write_checkpoint(path, sample_entries(), {})
    monkeypatch.undo()
    assert os.listdir(tmp_path) == [path.name]
    assert read_checkpoint(path).registered_devices == {"r/x": ["a"]}


def test_document_matches_the_reader() -> None:
    doc = checkpoint_document(sample_entries(), {"example.com/gpu": ["GPU-a"]})
    assert parse_checkpoint(json.dumps(doc)).entries == sample_entries()
