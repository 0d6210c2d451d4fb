"""The dashboard's own questions: history for the charts, nodes needing attention, tiles."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.inventory.read.attention import needs_attention
from devicedeck.inventory.read.charts import resource_history
from devicedeck.inventory.read.freshness import Freshness
from devicedeck.inventory.read.overview import group_devices_by_resource_and_numa, natural_key
from devicedeck.ui.templating import numa_label

from .seed import Cluster, device, pod

GPU = "example.com/gpu"
STALE_AFTER = timedelta(seconds=90)


def test_history_replays_devices_health_allocations_and_staleness(
    session_factory: sessionmaker[Session],
) -> None:
    now = utcnow().replace(microsecond=0)
    hours = [now - timedelta(hours=h) for h in range(13)]  # hours[h] is h hours ago
    cluster = Cluster(session_factory)
    four = [device(f"gpu-{i}", 0) for i in range(4)]
    cluster.devices("a", GPU, four, hours[10] + timedelta(minutes=1))
    cluster.devices("b", GPU, [device("gpu-0", 0), device("gpu-1", 0)], hours[10])
    cluster.pods("a", [pod("ml", "p", "c", GPU, "gpu-0", "gpu-1")], hours[8])
    sick = [device("gpu-0", 0, "Unhealthy"), *four[1:]]
    cluster.devices("a", GPU, sick, hours[6])
    cluster.pods("a", [pod("ml", "p", "c", GPU, "gpu-0")], hours[4])
    cluster.devices("a", GPU, sick[:3], hours[3])  # gpu-3 removed
    cluster.devices("a", GPU, sick[:3], now - timedelta(seconds=10))  # a keeps reporting
    # b last reported 10 hours ago, so it has been stale since 10 h ago plus 90 s.
    clock = Freshness(now=now, stale_after=STALE_AFTER)
    with session_factory() as session:
        history = resource_history(session, clock, timedelta(hours=12), points=12)
    assert list(history["resources"]) == [GPU]
    series = history["resources"][GPU]
    # Index i is 12 - i hours ago; a value counts from the moment of its event. At 10 h ago
    # only b's two devices existed (a's came a minute later); from then on b is stale.
    assert series["devices"] == [0, 0, 2, 6, 6, 6, 6, 6, 6, 5, 5, 5, 5]
    assert series["healthy"] == [0, 0, 2, 4, 4, 4, 3, 3, 3, 2, 2, 2, 2]
    assert series["allocated"] == [0, 0, 0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1]
    assert history["times"][-1] == now.isoformat()


def test_needs_attention_puts_stale_first(session_factory: sessionmaker[Session]) -> None:
    now = utcnow()
    cluster = Cluster(session_factory)
    cluster.devices("fine", GPU, [device("g0", 0)], now)
    cluster.devices("sick", GPU, [device("g0", 0, "Unhealthy"), device("g1", 0, "Bad")], now)
    cluster.devices("shrunk", GPU, [device("g0", 0), device("g1", 0)], now - timedelta(seconds=5))
    cluster.devices("shrunk", GPU, [device("g0", 0)], now)
    cluster.devices("quiet", GPU, [device("g0", 0, "Unhealthy")], now - timedelta(hours=1))
    with session_factory() as session:
        found = needs_attention(session, Freshness(now=now, stale_after=STALE_AFTER), [])
    assert found["count"] == 3 and found["nodes"] == 3 and found["pools"] == 0
    assert [
        (i["name"], i["stale"], i["unhealthy"], i["unknown"], i["lost"]) for i in found["items"]
    ] == [
        # A stale node's devices are Unknown, as the totals count them.
        ("quiet", True, {}, {GPU: 1}, {}),
        ("sick", False, {GPU: 2}, {}, {}),
        ("shrunk", False, {}, {}, {GPU: 1}),
    ]
    # What the stale node said last is kept apart.
    assert found["items"][0]["unhealthy_when_seen"] == {GPU: 1}
    # A removal older than the window is history, not a problem.
    later = Freshness(now=now + timedelta(days=2), stale_after=timedelta(days=3))
    with session_factory() as session:
        names = [i["name"] for i in needs_attention(session, later, [])["items"]]
    assert names == ["sick", "quiet"]


def summary(device_id: str, numa: list[int], state: str = "present") -> dict[str, object]:
    return {
        "device_id": device_id,
        "resource": GPU,
        "numa_nodes": numa,
        "state": state,
        "health": "Healthy",
        "allocation": None,
    }


def test_tiles_group_by_numa_in_natural_order() -> None:
    devices = [
        summary("gpu-10", [1]),
        summary("gpu-2", [1]),
        summary("gpu-1", []),
        summary("gpu-0", [0, 1]),
        summary("gpu-3", [1], state="removed"),
        summary("gpu-9", [0]),
    ]
    [resource] = group_devices_by_resource_and_numa(devices)
    groups = resource["groups"]
    assert [(g["numa_nodes"], [d["device_id"] for d in g["devices"]]) for g in groups] == [
        ([0], ["gpu-9"]),
        ([0, 1], ["gpu-0"]),
        ([1], ["gpu-2", "gpu-10"]),
        ([], ["gpu-1"]),
    ]
    # Removed devices are kept apart (the page collapses them behind their count).
    assert [d["device_id"] for d in resource["removed"]] == ["gpu-3"]
    assert resource["counts"]["devices"] == 5 and resource["counts"]["removed"] == 1
    assert sorted(["a10", "a9", "a10b", "b"], key=natural_key) == ["a9", "a10", "a10b", "b"]
    # The page words each group; the query gives only its NUMA nodes.
    assert [numa_label(g["numa_nodes"]) for g in groups] == [
        "NUMA 0",
        "NUMA 0 + 1",
        "NUMA 1",
        "No NUMA affinity",
    ]
