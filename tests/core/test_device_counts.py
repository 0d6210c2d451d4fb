"""The counters the database keeps per node and resource (device_counts, devices.held) always
equal a count over the devices and allocations themselves, whoever writes."""

from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.db import write_session
from devicedeck.inventory.models import Allocation, Device, DeviceCount, Node
from devicedeck.inventory.read.pagination import bounded_count

from .conftest import GPU, NIC, Api, dev, held, listandwatch, pod, podresources


def counted(session: Session) -> dict[tuple[int, str], dict[str, int]]:
    rows = session.scalars(select(DeviceCount))
    return {
        (r.node_id, r.resource): {
            "devices": r.devices,
            "healthy": r.healthy,
            "unhealthy": r.unhealthy,
            "unknown": r.unknown,
            "allocated": r.allocated,
            "free": r.free,
        }
        for r in rows
        if any((r.devices, r.healthy, r.unhealthy, r.unknown, r.allocated, r.free))
    }


def recounted(session: Session) -> dict[tuple[int, str], dict[str, int]]:
    """The same numbers, counted from scratch."""
    holders = Counter(
        session.scalars(select(Allocation.device_pk).where(Allocation.ended.is_(None)))
    )
    expected: dict[tuple[int, str], dict[str, int]] = {}
    for device in session.scalars(select(Device).where(Device.state == "present")):
        counts = expected.setdefault(
            (device.node_id, device.resource),
            dict.fromkeys(("devices", "healthy", "unhealthy", "unknown", "allocated", "free"), 0),
        )
        counts["devices"] += 1
        key = {"Healthy": "healthy", "Unhealthy": "unhealthy"}.get(device.health, "unknown")
        counts[key] += 1
        if holders[device.id]:
            counts["allocated"] += 1
        elif device.health == "Healthy":
            counts["free"] += 1
    return expected


def assert_consistent(factory: sessionmaker[Session]) -> dict[tuple[int, str], dict[str, int]]:
    with factory() as session:
        holders = dict(
            session.execute(
                select(Allocation.device_pk, func.count())
                .where(Allocation.ended.is_(None))
                .group_by(Allocation.device_pk)
            ).all()
        )
        held_column = dict(session.execute(select(Device.id, Device.held)).all())
        assert {pk: n for pk, n in held_column.items() if n} == holders
        found = counted(session)
        assert found == recounted(session)
        return found


def node_id(factory: sessionmaker[Session], name: str) -> int:
    with factory() as session:
        found: int = session.scalars(select(Node.id).where(Node.name == name)).one()
        return found


def test_counters_follow_every_kind_of_snapshot(
    api: Api, session_factory: sessionmaker[Session]
) -> None:
    gpus = [dev("gpu-0"), dev("gpu-1"), dev("gpu-2", "Unhealthy"), dev("gpu-3")]
    api.ingest_listandwatch(listandwatch("node-a", gpus, 1))
    api.ingest_listandwatch(listandwatch("node-a", [dev("nic-0")], 1, resource=NIC))
    a = node_id(session_factory, "node-a")
    assert assert_consistent(session_factory)[(a, GPU)] == {
        "devices": 4,
        "healthy": 3,
        "unhealthy": 1,
        "unknown": 0,
        "allocated": 0,
        "free": 3,
    }

    shared = pod("infer", containers={"a": [held(GPU, "gpu-0")]})
    trainer = pod("train", containers={"main": [held(GPU, "gpu-1", "gpu-2")]})
    api.ingest_podresources(podresources("node-a", [shared, trainer], 1))
    counts = assert_consistent(session_factory)[(a, GPU)]
    assert (counts["allocated"], counts["free"]) == (3, 1)

    # A device goes, one turns unhealthy, the shared pod ends.
    api.ingest_listandwatch(
        listandwatch("node-a", [dev("gpu-0"), dev("gpu-1", "Unhealthy"), dev("gpu-2")], 2)
    )
    api.ingest_podresources(podresources("node-a", [trainer], 2))
    counts = assert_consistent(session_factory)[(a, GPU)]
    assert counts == {
        "devices": 3,
        "healthy": 2,
        "unhealthy": 1,
        "unknown": 0,
        "allocated": 2,
        "free": 1,
    }

    # The removed device comes back; PodResources names a device no plugin reported yet.
    api.ingest_listandwatch(listandwatch("node-a", gpus, 3))
    newcomer = pod("late", containers={"main": [held(GPU, "gpu-7")]})
    api.ingest_podresources(podresources("node-b", [newcomer], 1))
    found = assert_consistent(session_factory)
    assert found[(a, GPU)]["devices"] == 4
    assert found[(node_id(session_factory, "node-b"), GPU)]["allocated"] == 1

    # Everything released.
    api.ingest_podresources(podresources("node-a", [], 3))
    assert assert_consistent(session_factory)[(a, GPU)]["allocated"] == 0


def test_counters_follow_writes_outside_ingest(
    api: Api, session_factory: sessionmaker[Session]
) -> None:
    """Any writer keeps them right: the counts are kept by the database, not by the ingest
    code, so a pod ended by the cluster watcher or a node deleted by hand needs no care."""
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0"), dev("gpu-1")], 1))
    api.ingest_listandwatch(listandwatch("node-b", [dev("gpu-0")], 1))
    api.ingest_podresources(
        podresources("node-a", [pod("p", containers={"c": [held(GPU, "gpu-0", "gpu-1")]})], 1)
    )
    assert_consistent(session_factory)

    with write_session(session_factory) as session:
        session.execute(update(Allocation).values(ended=utcnow()))
    assert (
        assert_consistent(session_factory)[(node_id(session_factory, "node-a"), GPU)]["free"] == 2
    )

    with write_session(session_factory) as session:
        session.execute(update(Device).where(Device.device_id == "gpu-1").values(health="Unknown"))
    assert_consistent(session_factory)

    with write_session(session_factory) as session:
        session.execute(delete(Node).where(Node.name == "node-a"))
    found: dict[Any, Any] = assert_consistent(session_factory)
    assert list(found) == [(node_id(session_factory, "node-b"), GPU)]


def test_count_past_the_limit_is_an_estimate_on_postgresql(
    api: Api, session_factory: sessionmaker[Session]
) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev(f"gpu-{i}") for i in range(30)], 1))
    rows = select(Device.id).where(Device.state == "present")
    with session_factory() as session:
        assert bounded_count(session, rows, limit=30) == (30, True)
        count, exact = bounded_count(session, rows, limit=10)
        postgresql = session.get_bind().dialect.name == "postgresql"
    if postgresql:
        assert not exact and count > 10
    else:
        assert (count, exact) == (30, True)
    page = api.get("/api/v1/devices", limit=5)
    assert (page["count"], page["count_exact"]) == (30, True)


def test_estimate_of_a_query_with_an_in_list(
    api: Api, session_factory: sessionmaker[Session]
) -> None:
    """`IN (...)` compiles to an expanding parameter; the estimate's EXPLAIN, sent as text,
    must have it rendered (the pods list has one, and answered 500 past 10,000 pods)."""
    api.ingest_listandwatch(listandwatch("node-a", [dev(f"gpu-{i}") for i in range(30)], 1))
    rows = select(Device.id).where(Device.state.in_(["present", "removed"]))
    with session_factory() as session:
        count, exact = bounded_count(session, rows, limit=10)
        postgresql = session.get_bind().dialect.name == "postgresql"
    assert (not exact and count > 10) if postgresql else (count, exact) == (30, True)
