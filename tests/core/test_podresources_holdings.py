"""What a PodResources snapshot replaces is read in one statement, devices with their current
allocations: allocations on devices the snapshot no longer names still end."""

from __future__ import annotations

from .conftest import GPU, NIC, Api, dev, held, listandwatch, pod, podresources


def test_a_hold_on_a_removed_device_of_a_resource_no_longer_named_ends(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("g0"), dev("g1")], 1))
    api.ingest_listandwatch(listandwatch("node-a", [dev("n0")], 1, resource=NIC))
    holds = {"main": [held(GPU, "g0")], "side": [held(NIC, "n0")]}
    first = api.ingest_podresources(podresources("node-a", [pod("p", containers=holds)], 1))
    assert first["allocated"] == 2
    # The GPU plugin stops listing g0 while the pod still holds it.
    assert api.ingest_listandwatch(listandwatch("node-a", [dev("g1")], 2))["removed"] == 1
    # The next snapshot names neither GPUs nor the NIC: both holds end.
    result = api.ingest_podresources(podresources("node-a", [], 2))
    assert (result["released"], result["allocated"]) == (2, 0)
    released = {(e["resource"], e["device_id"]) for e in api.events(kind="released")}
    assert released == {(GPU, "g0"), (NIC, "n0")}
    assert api.get("/api/v1/pods/ml/p")["running"] is False
    # And a hold on it again starts a new allocation of the same device.
    again = api.ingest_podresources(
        podresources("node-a", [pod("q", containers={"main": [held(GPU, "g0")]})], 3)
    )
    assert (again["allocated"], again["added"]) == (1, 0)


def test_two_containers_and_two_pods_on_one_node_keep_their_holds_apart(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-b", [dev(f"g{i}") for i in range(4)], 1))
    pods = [
        pod("p", containers={"a": [held(GPU, "g0")], "b": [held(GPU, "g1")]}),
        pod("q", namespace="serving", containers={"a": [held(GPU, "g2")]}),
    ]
    assert api.ingest_podresources(podresources("node-b", pods, 1))["allocated"] == 3
    # Container b moves to g3; q keeps g2; p's container a keeps g0.
    pods[0] = pod("p", containers={"a": [held(GPU, "g0")], "b": [held(GPU, "g3")]})
    result = api.ingest_podresources(podresources("node-b", pods, 2))
    assert (result["released"], result["allocated"]) == (1, 1)
    [released] = api.events(kind="released")
    assert (released["pod"], released["container"], released["device_id"]) == ("p", "b", "g1")
    holders = {
        d["device_id"]: (d["allocation"] or {}).get("pod") for d in api.devices(node="node-b")
    }
    assert holders == {"g0": "p", "g1": None, "g2": "q", "g3": "p"}
