"""A page's reads all see one moment, even while an ingest commits between them."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import select

from devicedeck.clock import utcnow
from devicedeck.inventory.models import Device
from devicedeck.inventory.read.freshness import Freshness
from devicedeck.inventory.read.queries import get_device
from devicedeck.web.db_sessions import read_session
from devicedeck.web.state import service_state

from .conftest import Api, dev, listandwatch


def test_a_device_read_twice_in_one_request_does_not_see_a_flip_committed_between(
    api: Api, client: TestClient
) -> None:
    api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0")], 1))
    clock = Freshness(now=utcnow(), stale_after=timedelta(seconds=90))
    reads = read_session(service_state(client.app).session_factory)
    session = next(reads)
    try:
        pk = session.scalars(select(Device.id).where(Device.device_id == "gpu-0")).one()
        first = get_device(session, pk, clock)
        api.ingest_listandwatch(listandwatch("node-a", [dev("gpu-0", "Unhealthy")], 2))
        # Without one snapshot, the health would be new and the history old, or both new.
        assert get_device(session, pk, clock) == first
        assert first["health"] == "Healthy"
    finally:
        reads.close()
    assert api.device("node-a", "gpu-0")["health"] == "Unhealthy"
