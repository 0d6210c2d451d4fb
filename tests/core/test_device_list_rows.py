"""What a ListAndWatch snapshot writes to each device row: every column it changes, none it
does not (a present device listed as before is left alone), whatever mix of changes one
snapshot brings."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from .conftest import GPU, Api, MakeApi, dev, held, listandwatch, pod, podresources


def test_a_changed_raw_health_within_unhealthy_is_kept_without_an_event(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0", "XID 79"), dev("gpu-1")], 1))
    before = api.device("node-a", "gpu-0")
    result = api.ingest_listandwatch(
        listandwatch("node-a", [dev("gpu-0", "XID 48"), dev("gpu-1")], 2)
    )
    assert result["health_changes"] == 0 and result["events"] == 0
    after = api.device("node-a", "gpu-0")
    assert (after["health"], after["raw_health"]) == ("Unhealthy", "XID 48")
    assert after["health_changed_at"] == before["health_changed_at"]


def test_one_snapshot_adds_removes_turns_and_moves_devices_at_once(api: Api) -> None:
    api.ingest_listandwatch(
        listandwatch("node-a", [dev("gpu-0", numa=[0]), dev("gpu-1"), dev("gpu-2")], 1)
    )
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0", numa=[0]), dev("gpu-1")], 2))
    result = api.ingest_listandwatch(
        listandwatch(
            "node-a",
            [dev("gpu-0", numa=[1]), dev("gpu-2", "Unhealthy"), dev("gpu-3")],
            3,
        )
    )
    assert (result["added"], result["removed"], result["reappeared"]) == (1, 1, 1)
    assert result["health_changes"] == 1
    found = {d["device_id"]: d for d in api.devices(node="node-a", state="any")}
    assert {k: (d["state"], d["health"], d["numa_nodes"]) for k, d in found.items()} == {
        "gpu-0": ("present", "Healthy", [1]),
        "gpu-1": ("removed", "Healthy", []),
        "gpu-2": ("present", "Unhealthy", []),
        "gpu-3": ("present", "Healthy", []),
    }
    assert found["gpu-2"]["removed_at"] is None
    latest = Counter(e["kind"] for e in api.events() if e["at"] == found["gpu-3"]["first_seen"])
    assert latest == Counter(
        {
            "topology_changed": 1,
            "device_reappeared": 1,
            "health_changed": 1,
            "device_removed": 1,
            "device_added": 1,
        }
    )


def test_a_removed_device_keeps_when_it_left_while_it_stays_unlisted(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1))
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 2))
    gone = api.device("node-a", "gpu-1")
    assert gone["last_seen"] == gone["removed_at"] is not None
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0", "Unhealthy")], 3))
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 4))
    still = api.device("node-a", "gpu-1")
    assert (still["state"], still["removed_at"], still["last_seen"]) == (
        "removed",
        gone["removed_at"],
        gone["last_seen"],
    )
    # A present device reads its node's last-seen time.
    node = api.get("/api/v1/nodes/node-a")
    assert api.device("node-a", "gpu-0")["last_seen"] == node["last_seen"]


def test_a_device_first_named_by_podresources_takes_the_plugin_health(api: Api) -> None:
    api.ingest_podresources(
        podresources("node-a", [pod("p", containers={"main": [held(GPU, "gpu-0")]})], 1)
    )
    unknown = api.device("node-a", "gpu-0")
    assert (unknown["health"], unknown["health_source"]) == ("Unknown", "unknown")
    result = api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0", "Unhealthy")], 1))
    assert result["added"] == 0 and result["health_changes"] == 1
    known = api.device("node-a", "gpu-0")
    assert (known["id"], known["health"], known["raw_health"], known["health_source"]) == (
        unknown["id"],
        "Unhealthy",
        "Unhealthy",
        "plugin",
    )


def test_a_new_node_over_the_per_node_limit_is_refused_and_not_created(
    make_api: MakeApi, db_rows: Callable[..., dict]
) -> None:
    small = make_api(max_devices_per_node=2)
    before = db_rows()
    over = listandwatch("node-new", [dev("a"), dev("b"), dev("c")], 1)
    refused = small.post("/api/v1/ingest/listandwatch", over, expect=422)
    assert "max_devices_per_node" in refused.text
    assert db_rows() == before
    result = small.ingest_listandwatch(listandwatch("node-new", [dev("a"), dev("b")], 2))
    assert result["added"] == 2
    assert [e["kind"] for e in small.events(node="node-new")].count("node_added") == 1


def test_a_plugin_registration_is_seen_again_and_changes_with_an_event(api: Api) -> None:
    plugin = {"endpoint": "gpu.sock", "version": "v1beta1"}
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 1, plugin=plugin))
    [first] = api.get("/api/v1/nodes/node-a")["plugins"]
    assert first["options"] is None
    # The same registration with a changed device list: seen again, no event.
    result = api.ingest_listandwatch(
        listandwatch("node-a", [dev("gpu-0", "Unhealthy")], 2, plugin=plugin)
    )
    assert result["events"] == 1
    [again] = api.get("/api/v1/nodes/node-a")["plugins"]
    assert again["last_seen"] > first["last_seen"]
    assert again["first_seen"] == first["first_seen"]
    changed = {**plugin, "options": {"preStartRequired": True}}
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 3, plugin=changed))
    [now] = api.get("/api/v1/nodes/node-a")["plugins"]
    assert now["options"]["pre_start_required"] is True
    [event] = api.events(kind="plugin_changed")
    assert event["before"] == {"endpoint": "gpu.sock", "api_version": "v1beta1", "options": None}
    assert event["after"]["options"]["pre_start_required"] is True
    assert event["after"]["endpoint"] == "gpu.sock"
