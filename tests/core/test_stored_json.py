"""What a new node's snapshots store in JSON columns: the values the snapshot gave, text
beyond ASCII included, whatever serialises the statements' JSON parameters."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.inventory.models import Device, Event, NodeResource

from .conftest import GPU, Api, dev, held, listandwatch, pod, podresources

IDS = ["gpu-0", "gpu-é-1", "gpu-☃-2"]


def test_json_columns_hold_what_the_snapshots_said(
    api: Api, session_factory: sessionmaker[Session]
) -> None:
    api.ingest_listandwatch(
        listandwatch(
            "node-a",
            [dev(IDS[0], numa=[0]), dev(IDS[1], "Unhealthy", numa=[1, 0]), dev(IDS[2])],
            1,
            plugin={"endpoint": "gpu.sock", "options": {"pre_start_required": True}},
        )
    )
    api.ingest_podresources(
        podresources(
            "node-a",
            [pod("trainer-0", containers={"main": [held(GPU, IDS[1], numa=[1])]})],
            2,
            allocatable={"devices": [held(GPU, IDS[0], IDS[2])]},
        )
    )
    with session_factory() as session:
        numa = {
            row[0]: row[1] for row in session.execute(select(Device.device_id, Device.numa_nodes))
        }
        allocatable = session.execute(select(NodeResource.allocatable_device_ids)).scalars().all()
        events: list[tuple[str, str | None, Any]] = [
            (row[0], row[1], row[2])
            for row in session.execute(
                select(Event.kind, Event.device_id, Event.after).order_by(Event.id)
            )
        ]
        numa_text = session.execute(
            text("SELECT CAST(numa_nodes AS TEXT) FROM devices ORDER BY device_id")
        ).scalars()
        assert list(numa_text) == ["[0]", "[0, 1]", "[]"]
    assert numa == {IDS[0]: [0], IDS[1]: [0, 1], IDS[2]: []}
    assert allocatable == [[IDS[0], IDS[2]]]
    options = {"pre_start_required": True, "get_preferred_allocation_available": False}
    assert events == [
        ("node_added", None, None),
        ("device_added", IDS[0], {"health": "Healthy", "numa_nodes": [0], "raw_health": "Healthy"}),
        (
            "device_added",
            IDS[1],
            {"health": "Unhealthy", "numa_nodes": [0, 1], "raw_health": "Unhealthy"},
        ),
        ("device_added", IDS[2], {"health": "Healthy", "numa_nodes": [], "raw_health": "Healthy"}),
        (
            "plugin_registered",
            None,
            {"options": options, "endpoint": "gpu.sock", "api_version": None},
        ),
        ("allocated", IDS[1], {"health": "Unhealthy"}),
    ]
