"""Snapshot building: pod UIDs from the checkpoint, stable content, derived health, and
bodies the service's own ingest schemas accept."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, datetime

from devicedeck.agent.derived import DerivedHealth
from devicedeck.agent.snapshots import (
    NumaMap,
    devices_by_resource,
    listandwatch_snapshot,
    match_pod_uids,
    plugin_devices,
    podresources_snapshot,
)
from devicedeck.inventory.schemas import ListAndWatchSnapshot, PodResourcesSnapshot
from devicedeck.kubelet.checkpoint import Checkpoint, PodDeviceEntry
from devicedeck.kubelet.proto import deviceplugin_pb2 as dp
from devicedeck.kubelet.proto import podresources_pb2 as pr

GPU = "example.com/gpu"
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SOURCE = {"boot_id": "b", "seq": 1}


def entry(device: str, numa: int | None = None, resource: str = GPU) -> pr.ContainerDevices:
    topology = None if numa is None else pr.TopologyInfo(nodes=[pr.NUMANode(ID=numa)])
    return pr.ContainerDevices(resource_name=resource, device_ids=[device], topology=topology)


def pod(namespace: str, name: str, *devices: pr.ContainerDevices) -> pr.PodResources:
    container = pr.ContainerResources(name="main", devices=list(devices))
    return pr.PodResources(name=name, namespace=namespace, containers=[container])


def cp_entry(uid: str, *devices: str, numa: int = 0) -> PodDeviceEntry:
    return PodDeviceEntry(uid, "main", GPU, {numa: list(devices)})


def test_pod_uids_come_from_the_checkpoint_when_the_match_is_unambiguous() -> None:
    pods = pr.ListPodResourcesResponse(
        pod_resources=[
            # g0 sits on two NUMA nodes, so List names it twice.
            pod("ml", "train", entry("g0", 0), entry("g0", 1), entry("g1", 1)),
            pod("ml", "idle"),
            pod("ml", "reused", entry("g2", 0)),
        ]
    )
    checkpoint = Checkpoint(
        entries=[
            PodDeviceEntry("uid-train", "main", GPU, {0: ["g0"], 1: ["g0", "g1"]}),
            # A deleted pod's entry lingers with the same container and device as a new one.
            cp_entry("uid-old", "g2"),
            cp_entry("uid-new", "g2"),
        ]
    )
    assert match_pod_uids(pods, checkpoint) == {("ml", "train"): "uid-train"}
    assert match_pod_uids(pods, None) == {}


def test_podresources_snapshot_is_stable_and_accepted_by_the_service_schema() -> None:
    entries = [entry("g0", 0), entry("g1", 1), entry("g2")]
    pods = [pod("ml", "a", *entries), pod("default", "b", entry("g3", 0))]
    allocatable = [entry(f"g{i}", i % 2) for i in range(4)]
    checkpoint = Checkpoint(entries=[cp_entry("uid-b", "g3")])

    def build(seed: int) -> dict[str, object]:
        rng = random.Random(seed)
        shuffled_pods = [pod(p.namespace, p.name, *rng.sample(list(entries), 3)) for p in pods[:1]]
        shuffled_pods.append(pods[1])
        rng.shuffle(shuffled_pods)
        snapshot = podresources_snapshot(
            "node-a",
            pr.ListPodResourcesResponse(pod_resources=shuffled_pods),
            pr.AllocatableResourcesResponse(devices=rng.sample(allocatable, 4)),
            checkpoint,
            NOW,
        )
        return {"key": snapshot.key, "payload": snapshot.payload(SOURCE)}

    first, second = build(1), build(2)
    # The kubelet answers from Go maps: order changes must not look like changes.
    assert first["key"] == second["key"]
    parsed = PodResourcesSnapshot.model_validate(first["payload"])
    by_name = {p.name: p for p in parsed.pod_resources}
    assert by_name["b"].uid == "uid-b" and by_name["a"].uid is None
    # NUMA node 0 survives (proto3 JSON drops zero values unless told not to).
    numa = {
        d.device_ids[0]: d.topology.numa_ids() if d.topology else None
        for d in by_name["a"].containers[0].devices
    }
    assert numa == {"g0": [0], "g1": [1], "g2": None}
    assert parsed.allocatable is not None and len(parsed.allocatable.devices) == 4


def test_plugin_messages_become_listandwatch_snapshots_the_service_accepts() -> None:
    message = dp.ListAndWatchResponse(
        devices=[
            dp.Device(ID="d1", health="Unhealthy"),
            dp.Device(
                ID="d0", health="Healthy", topology=dp.TopologyInfo(nodes=[dp.NUMANode(ID=0)])
            ),
        ]
    )
    plugin = {"endpoint": "x.sock", "version": "v1beta1", "options": {"pre_start_required": True}}
    snapshot = listandwatch_snapshot(
        "node-a",
        "example.com/x",
        plugin_devices(message),
        health_source="plugin",
        observed_at=NOW,
        plugin=plugin,
    )
    parsed = ListAndWatchSnapshot.model_validate(snapshot.payload(SOURCE))
    assert [(d.ID, d.health) for d in parsed.devices] == [("d0", "Healthy"), ("d1", "Unhealthy")]
    assert parsed.devices[0].topology is not None and parsed.devices[0].topology.numa_ids() == [0]
    assert parsed.health_source == "plugin" and parsed.plugin is not None
    assert parsed.plugin.options is not None and parsed.plugin.options.pre_start_required


def derive(
    health: DerivedHealth,
    allocatable: list[pr.ContainerDevices],
    allocated: list[pr.ContainerDevices] = (),  # type: ignore[assignment]
    registered: dict[str, list[str]] | None = None,
    holding_since: float | None = None,
) -> dict[str, tuple[str, list[int]]]:
    numa: NumaMap = defaultdict(set)
    result = health.devices(
        healthy=devices_by_resource(allocatable, numa),
        allocated=devices_by_resource(allocated, numa),
        registered=registered or {},
        numa=numa,
        holding_since=holding_since,
    )
    return {
        d["ID"]: (d["health"], [n["ID"] for n in d.get("topology", {}).get("nodes", [])])
        for d in result.get(GPU, [])
    }


def test_derived_health_follows_the_kubelets_allocatable_set() -> None:
    health = DerivedHealth()
    assert derive(health, [entry("g0", 0), entry("g1", 1), entry("g2", 1)]) == {
        "g0": ("Healthy", [0]),
        "g1": ("Healthy", [1]),
        "g2": ("Healthy", [1]),
    }
    # g1 failed while a pod holds it; g2 vanished; g3 is only in the checkpoint's healthy
    # set from an older write; g4 is new and healthy.
    after = derive(
        health,
        [entry("g0", 0), entry("g4", 0)],
        allocated=[entry("g1", 1)],
        registered={GPU: ["g0", "g3"]},
    )
    assert after == {
        "g0": ("Healthy", [0]),
        "g1": ("Unhealthy", [1]),
        "g2": ("Unhealthy", [1]),  # seen before, now missing: kept, and unhealthy
        "g3": ("Unhealthy", []),
        "g4": ("Healthy", [0]),
    }
    # A device coming back is healthy again, its NUMA node remembered.
    assert derive(health, [entry("g2")])["g2"] == ("Healthy", [1])


def test_after_a_kubelet_restart_an_empty_offer_is_held_until_the_plugin_is_back() -> None:
    health = DerivedHealth()
    three = [entry("g0"), entry("g1"), entry("g2")]
    assert {d: h for d, (h, _) in derive(health, three).items()} == dict.fromkeys(
        ("g0", "g1", "g2"), "Healthy"
    )
    # The restarted kubelet offers nothing until its plugins register again: held.
    held = derive(health, [], holding_since=1.0)
    assert {d: h for d, (h, _) in held.items()} == dict.fromkeys(("g0", "g1", "g2"), "Healthy")
    # The plugin is back (it offers devices): its list is believed at once, within the hold,
    # so a device that failed meanwhile shows now, not a minute later ...
    after = derive(health, [entry("g0")], holding_since=1.0)
    assert {d: h for d, (h, _) in after.items()} == {
        "g0": "Healthy",
        "g1": "Unhealthy",
        "g2": "Unhealthy",
    }
    # ... and so does its last device failing: the plugin is back, nothing is held.
    empty = derive(health, [], holding_since=1.0)
    assert {d: h for d, (h, _) in empty.items()} == dict.fromkeys(("g0", "g1", "g2"), "Unhealthy")
    # Another restart: held again until the plugin is back, with the offer last believed.
    assert derive(health, three)["g1"][0] == "Healthy"
    assert derive(health, [], holding_since=2.0)["g1"][0] == "Healthy"
    assert derive(health, [entry("g0"), entry("g2")], holding_since=2.0)["g1"][0] == "Unhealthy"
    # After the hold, an empty offer is every device unhealthy.
    assert derive(health, [])["g0"][0] == "Unhealthy"


def test_a_resource_the_checkpoint_names_without_healthy_devices_is_reported_empty() -> None:
    # An agent started after the resource's last healthy device failed: the kubelet offers
    # none, holds none for a pod, and its checkpoint names the resource with no device.
    health = DerivedHealth()
    numa: NumaMap = defaultdict(set)
    result = health.devices(healthy={}, allocated={}, registered={GPU: []}, numa=numa)
    assert result == {GPU: []}
