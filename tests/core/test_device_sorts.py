"""Devices: filter values in any letter case, node name prefixes, and the sorts an operator
reaches for (unhealthy first, by holder, by when health last changed), across pages."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.inventory.models import Device, Node
from devicedeck.inventory.read.freshness import Freshness
from devicedeck.inventory.read.queries import (
    DEVICE_SORTS,
    DeviceFilters,
    _device_conditions,
    effective_health,
    list_devices,
)

from .conftest import GPU, NIC, Api, dev, held, listandwatch, pod, podresources


def fleet(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("gpu-a", [dev("a0"), dev("a1", "Unhealthy")], 1))
    api.ingest_listandwatch(listandwatch("gpu-b", [dev("b0"), dev("b1")], 1))
    api.ingest_listandwatch(listandwatch("cpu-c", [dev("c0", "Unhealthy"), dev("c1")], 1))
    api.ingest_listandwatch(listandwatch("gpu-b", [dev("b0", "Unhealthy"), dev("b1")], 2))
    api.ingest_podresources(
        podresources("gpu-b", [pod("zeta", containers={"m": [held(GPU, "b1")]})], 1)
    )
    api.ingest_podresources(
        podresources("gpu-a", [pod("alpha", containers={"m": [held(GPU, "a0")]})], 1)
    )


def ids(devices: list[dict]) -> list[str]:
    return [d["device_id"] for d in devices]


def test_filter_values_in_any_case_and_node_prefix(api: Api) -> None:
    fleet(api)
    assert sorted(ids(api.devices(health="unhealthy"))) == ["a1", "b0", "c0"]
    assert ids(api.devices(health="UNHEALTHY", node="gpu-a")) == ["a1"]
    assert len(api.devices(state="ANY")) == 6
    assert sorted(ids(api.devices(node_prefix="gpu-"))) == ["a0", "a1", "b0", "b1"]
    assert api.devices(node_prefix="%") == []  # a prefix, not a pattern


def test_sorts_unhealthy_first_by_holder_and_by_health_since(api: Api) -> None:
    fleet(api)
    attention = api.all_pages("/api/v1/devices", sort="attention", limit=2)
    assert [d["health"] for d in attention][:3] == ["Unhealthy"] * 3
    assert ids(attention)[:3] == ["c0", "a1", "b0"]  # then by node name
    holders = api.all_pages("/api/v1/devices", sort="-holder", limit=2)
    assert [(d["allocation"] or {}).get("pod") for d in holders][:2] == ["zeta", "alpha"]
    since = api.all_pages("/api/v1/devices", sort="-health_since", limit=1)
    assert ids(since)[0] == "b0"  # the last to change health
    assert sorted(ids(since)) == ["a0", "a1", "b0", "b1", "c0", "c1"]


def test_health_first_sorts_list_what_one_sort_of_every_device_lists(
    api: Api, session_factory: sessionmaker[Session]
) -> None:
    """`health` and `attention` read the devices of each health apart (stale nodes' devices
    read Unknown): with filters, both directions and any page length, their pages list what
    one ORDER BY over every matching device lists."""
    clock = _stale_and_fresh_fleet(api, session_factory)
    with session_factory() as session:
        variants = [
            DeviceFilters(),
            DeviceFilters(state="any"),
            DeviceFilters(resource=GPU),
            DeviceFilters(allocated=True),
            *(DeviceFilters(health=health) for health in ("Healthy", "Unhealthy", "unknown")),
        ]
        for filters in variants:
            for sort in ("health", "-health", "attention", "-attention"):
                expected = _one_sort(session, filters, clock, sort)
                for limit in (1, 2, 3, 50):
                    listed, cursor = [], None
                    while True:
                        page = list_devices(
                            session, filters, clock, sort=sort, cursor=cursor, limit=limit
                        )
                        listed += [device["id"] for device in page.items]
                        if (cursor := page.next_cursor) is None:
                            break
                    assert listed == expected, (filters, sort, limit)
        # Both kinds of Unknown are there, and the stale nodes' devices read it.
        unknown = list_devices(session, DeviceFilters(health="Unknown"), clock, limit=50).items
        assert sorted((d["node"], d["device_id"]) for d in unknown) == [
            ("new-a", "g9"),
            ("old-a", "g0"),
            ("old-b", "g0"),
            ("old-b", "g1"),
        ]


def _one_sort(session: Session, filters: DeviceFilters, clock: Freshness, sort: str) -> list[int]:
    """The ids in the order of one ORDER BY over every matching device."""
    columns = DEVICE_SORTS[sort.lstrip("-")](effective_health(clock))
    query = (
        select(Device.id)
        .join(Node, Node.id == Device.node_id)
        .where(*_device_conditions(filters, clock))
        .order_by(*(c.desc() if sort.startswith("-") else c for c in columns))
    )
    return list(session.scalars(query))


def _stale_and_fresh_fleet(api: Api, session_factory: sessionmaker[Session]) -> Freshness:
    """Two stale nodes and two fresh ones, every health, held and free devices, a removed one
    and a NIC; returns a clock at which the nodes seen before new-c are stale."""
    # The stale nodes report first: the clock below makes every node seen before new-c stale.
    api.ingest_listandwatch(listandwatch("old-b", [dev("g0"), dev("g1", "Unhealthy")], 1))
    api.ingest_podresources(
        podresources("old-b", [pod("old", containers={"m": [held(GPU, "g0")]})], 1)
    )
    api.ingest_listandwatch(listandwatch("old-a", [dev("g0")], 1))
    api.ingest_listandwatch(
        listandwatch("new-c", [dev("g0"), dev("g1", "Unhealthy"), dev("g2")], 1)
    )
    api.ingest_listandwatch(listandwatch("new-c", [dev("g0"), dev("g1", "Unhealthy")], 2))
    api.ingest_listandwatch(listandwatch("new-a", [dev("g0"), dev("g1")], 1))
    api.ingest_listandwatch(listandwatch("new-a", [dev("n0", "Unhealthy")], 1, resource=NIC))
    # A device no plugin described yet reads Unknown on a fresh node.
    api.ingest_podresources(
        podresources("new-a", [pod("late", containers={"m": [held(GPU, "g0", "g9")]})], 1)
    )
    with session_factory() as session:
        cutoff = session.scalar(select(Node.last_seen).where(Node.name == "new-c"))
    assert cutoff is not None
    return Freshness(cutoff, timedelta(0))


def test_counts_read_from_the_counters_match_the_devices(
    api: Api, session_factory: sessionmaker[Session]
) -> None:
    """Filters the counters count by take the count from them: the same number as counting
    the matching devices, stale nodes' devices counted Unknown."""
    clock = _stale_and_fresh_fleet(api, session_factory)
    with session_factory() as session:
        for resource in (None, GPU, NIC):
            for health in (None, "Healthy", "Unhealthy", "Unknown"):
                for allocated in (None, True, False):
                    for node, prefix in ((None, None), ("new-a", None), (None, "old-")):
                        filters = DeviceFilters(
                            node=node,
                            node_prefix=prefix,
                            resource=resource,
                            health=health,
                            allocated=allocated,
                        )
                        page = list_devices(session, filters, clock, limit=1000)
                        expected = len(_one_sort(session, filters, clock, "id"))
                        assert (page.count, page.count_exact) == (expected, True), filters
                        assert len(page.items) == expected


def test_devices_of_every_path_carry_their_nodes_name(
    api: Api, session_factory: sessionmaker[Session]
) -> None:
    """The node-name sort and prefix filter find a device whichever path inserted it: a
    ListAndWatch snapshot, a PodResources snapshot holding a device no list has shown yet,
    or another writer that leaves the name to the database."""
    api.ingest_listandwatch(listandwatch("node-b", [dev("b0"), dev("b1")], 1))
    api.ingest_podresources(
        podresources("node-c", [pod("job", containers={"m": [held(GPU, "c0")]})], 1)
    )
    api.ingest_listandwatch(listandwatch("node-a", [dev("a0")], 1, resource=NIC))
    with session_factory.begin() as session:
        node_a = session.scalars(select(Node).where(Node.name == "node-a")).one()
        first = session.scalars(select(Device).where(Device.device_id == "a0")).one()
        session.add(
            Device(
                node_id=node_a.id,
                resource=NIC,
                device_id="a1",
                health="Healthy",
                numa_nodes=[],
                health_source=first.health_source,
                state=first.state,
                first_seen=first.first_seen,
                last_seen=first.last_seen,
            )
        )
    by_node = api.all_pages("/api/v1/devices", sort="node", limit=2)
    assert [(d["node"], d["device_id"]) for d in by_node] == [
        ("node-a", "a0"),
        ("node-a", "a1"),
        ("node-b", "b0"),
        ("node-b", "b1"),
        ("node-c", "c0"),
    ]
    assert ids(api.devices(node_prefix="node-c")) == ["c0"]
    assert sorted(ids(api.devices(node_prefix="node-a"))) == ["a0", "a1"]
