"""Migration 0017 replays the change log a database already has into spells, so history from
before the upgrade counts in the reliability figures; after it, the trigger keeps them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from alembic import command
from sqlalchemy import MetaData, insert, select

from devicedeck.db import create_db_engine, make_session_factory, write_session
from devicedeck.inventory.models import DeviceIncident, Event
from devicedeck.migrate import alembic_config, upgrade_to_head

from .test_migrations import empty_database_url  # noqa: F401 - a fixture

T0 = datetime(2026, 11, 2, tzinfo=UTC)


def at(hours: int) -> datetime:
    return T0 + timedelta(hours=hours)


def event(kind: str, hours: int, device_pk: int, after: dict[str, str] | None) -> Event:
    return Event(
        at=at(hours), kind=kind, node="node-a", device_pk=device_pk, after=after, actor="test"
    )


def test_upgrade_replays_history_and_the_trigger_continues(
    empty_database_url: str,  # noqa: F811 - the fixture
) -> None:
    url = empty_database_url
    command.upgrade(alembic_config(url), "0016")
    engine = create_db_engine(url)
    factory = make_session_factory(engine)
    try:
        # The tables as migration 0016 left them: later migrations add columns the models know.
        tables = MetaData()
        tables.reflect(engine, only=["nodes", "devices"])
        with engine.begin() as connection:
            node_id = connection.execute(
                insert(tables.tables["nodes"])
                .values(name="node-a", first_seen=at(0), last_seen=at(0))
                .returning(tables.tables["nodes"].c.id)
            ).scalar_one()
            pk = connection.execute(
                insert(tables.tables["devices"])
                .values(
                    node_id=node_id,
                    resource="example.com/gpu",
                    device_id="gpu-0",
                    health="Unhealthy",
                    health_source="plugin",
                    numa_nodes=[],
                    state="removed",
                    first_seen=at(0),
                    last_seen=at(4),
                )
                .returning(tables.tables["devices"].c.id)
            ).scalar_one()
        with write_session(factory) as session:
            session.add_all(
                [
                    event("device_added", 0, pk, {"health": "Unhealthy"}),
                    event("health_changed", 1, pk, {"health": "Healthy"}),
                    event("topology_changed", 2, pk, {"numa_nodes": [1]}),
                    event("health_changed", 3, pk, {"health": "Unhealthy"}),
                    event("device_removed", 4, pk, {"state": "removed"}),
                ]
            )
        upgrade_to_head(url)

        def spells() -> list[tuple[str, datetime, datetime | None]]:
            with factory() as session:
                rows = session.execute(
                    select(DeviceIncident.kind, DeviceIncident.started, DeviceIncident.ended)
                    .where(DeviceIncident.device_pk == pk)
                    .order_by(DeviceIncident.started, DeviceIncident.kind)
                ).all()
            return [tuple(row) for row in rows]

        assert spells() == [
            ("unhealthy", at(0), at(1)),
            ("unhealthy", at(3), None),
            ("removed", at(4), None),
        ]
        # From here on the trigger writes them: the device comes back and recovers.
        with write_session(factory) as session:
            session.add(event("device_reappeared", 5, pk, {"state": "present"}))
            session.add(event("health_changed", 6, pk, {"health": "Healthy"}))
        assert spells() == [
            ("unhealthy", at(0), at(1)),
            ("unhealthy", at(3), at(6)),
            ("removed", at(4), at(5)),
        ]
        with factory() as session:
            nodes = session.scalars(
                select(DeviceIncident.node).where(DeviceIncident.device_pk == pk)
            ).all()
        # Replayed and written by the trigger alike, each spell names its device's node.
        assert nodes == ["node-a"] * 3
    finally:
        engine.dispose()
