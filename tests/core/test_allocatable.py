"""A node's allocatable sets, as its PodResources snapshots report them: each snapshot that
carries them replaces them (a set it no longer lists is gone, a changed one rewritten, an
unchanged one kept), one without them leaves them as they are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .conftest import GPU, NIC, Api, MakeApi, dev, held, listandwatch, pod, podresources
from .test_ingest_validation import PODRES, assert_refused

DONGLE = "example.com/dongle"


def allocatable(**sets: list[str]) -> dict[str, Any]:
    resources = {"gpu": GPU, "nic": NIC}
    return {
        "allocatable": {
            "devices": [
                {"resource_name": resources[name], "device_ids": ids} for name, ids in sets.items()
            ]
        }
    }


def kubelet_allocatable(api: Api, node: str) -> dict[str, list[str]]:
    result: dict[str, list[str]] = api.get(f"/api/v1/nodes/{node}")["kubelet_allocatable"]
    return result


def test_allocatable_sets_are_replaced_by_each_snapshot_that_carries_them(api: Api) -> None:
    pods = [pod("p", containers={"c": [held(GPU, "g0")]})]
    steps: list[tuple[dict[str, Any], dict[str, list[str]]]] = [
        (allocatable(gpu=["g1", "g0", "g1"], nic=["n0"]), {GPU: ["g0", "g1"], NIC: ["n0"]}),
        # The same sets again, with other pods: nothing to change.
        (allocatable(nic=["n0"], gpu=["g0", "g1"]), {GPU: ["g0", "g1"], NIC: ["n0"]}),
        # One set changed, one no longer listed.
        (allocatable(gpu=["g0", "g2"]), {GPU: ["g0", "g2"]}),
        # No allocatable list at all: the sets stay as they were.
        ({}, {GPU: ["g0", "g2"]}),
        (allocatable(gpu=["g0", "g2"], nic=["n1"]), {GPU: ["g0", "g2"], NIC: ["n1"]}),
        # An empty list: the kubelet has nothing allocatable.
        ({"allocatable": {"devices": []}}, {}),
        (allocatable(nic=["n0"]), {NIC: ["n0"]}),
    ]
    for seq, (extra, expected) in enumerate(steps, start=1):
        holders = pods if seq % 2 else [pod("q", containers={"c": [held(GPU, "g0")]})]
        api.ingest_podresources(podresources("node-a", holders, seq, **extra))
        assert kubelet_allocatable(api, "node-a") == expected, seq


def test_allocatable_devices_not_yet_listed_by_a_plugin_are_created_unknown(api: Api) -> None:
    result = api.ingest_podresources(
        podresources(
            "node-b",
            [pod("p", containers={"c": [held(GPU, "g0", numa=[1])]})],
            1,
            **allocatable(gpu=["g0", "g1"], nic=["n0"]),
        )
    )
    assert (result["added"], result["allocated"]) == (3, 1)
    devices = {(d["resource"], d["device_id"]): d for d in api.devices(node="node-b")}
    assert sorted(devices) == [(GPU, "g0"), (GPU, "g1"), (NIC, "n0")]
    assert {d["health"] for d in devices.values()} == {"Unknown"}
    assert devices[(GPU, "g0")]["numa_nodes"] == [1]
    assert devices[(GPU, "g1")]["numa_nodes"] == []
    assert devices[(GPU, "g0")]["allocation"]["pod"] == "p"
    added = api.events(node="node-b", kind="device_added")
    assert sorted((e["resource"], e["device_id"]) for e in added) == sorted(devices)
    for event in added:
        assert event["device"] == devices[(event["resource"], event["device_id"])]["id"]
        assert event["after"]["via"] == "podresources"
    [allocated] = api.events(node="node-b", kind="allocated")
    assert allocated["device"] == devices[(GPU, "g0")]["id"]


def test_devices_a_podresources_snapshot_creates_are_removed_by_their_plugins_next_list(
    api: Api,
) -> None:
    """The plugin's stream did not list them: its next snapshot, even with the content it last
    sent, is applied in full and removes them. A stream whose devices were not touched keeps
    its unchanged shortcut."""
    api.ingest_listandwatch(listandwatch("node-c", [dev("g0")], 1))
    api.ingest_listandwatch(listandwatch("node-c", [dev("n0")], 1, resource=NIC))
    api.ingest_listandwatch(listandwatch("node-c", [dev("d0")], 1, resource=DONGLE))
    created = api.ingest_podresources(
        podresources(
            "node-c",
            [pod("p", containers={"c": [held(GPU, "g0", "g1")]})],
            1,
            **allocatable(gpu=["g0", "g1"], nic=["n0", "n1"]),
        )
    )
    assert created["added"] == 2
    for resource, device_id in ((GPU, "g0"), (NIC, "n0")):
        again = api.ingest_listandwatch(
            listandwatch("node-c", [dev(device_id)], 2, resource=resource)
        )
        assert (again["changed"], again["removed"]) == (True, 1), resource
    untouched = api.ingest_listandwatch(listandwatch("node-c", [dev("d0")], 2, resource=DONGLE))
    assert untouched["changed"] is False
    present = {
        (d["resource"], d["device_id"])
        for d in api.devices(node="node-c")
        if d["state"] == "present"
    }
    assert present == {(GPU, "g0"), (NIC, "n0"), (DONGLE, "d0")}


def test_the_per_node_limit_counts_present_devices_of_every_resource(
    make_api: MakeApi, db_rows: Callable[..., dict]
) -> None:
    small = make_api(max_devices_per_node=4)
    small.ingest_listandwatch(listandwatch("node-d", [dev("n0"), dev("n1")], 1, resource=NIC))
    small.ingest_listandwatch(listandwatch("node-d", [dev("n9")], 2, resource=NIC))
    before = db_rows()
    # One NIC present (two removed), two GPUs held, two more allocatable: 5 devices.
    over = podresources(
        "node-d",
        [pod("p", containers={"c": [held(GPU, "g0", "g1")]})],
        1,
        **allocatable(gpu=["g0", "g1", "g2", "g3"]),
    )
    assert_refused(small.post(PODRES, over, expect=None), "pod_resources", "max_devices_per_node")
    assert db_rows() == before
    over["allocatable"]["devices"][0]["device_ids"] = ["g0", "g1", "g2"]
    assert small.ingest_podresources(over)["added"] == 3
