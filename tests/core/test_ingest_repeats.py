"""A snapshot whose body, but for its source and observed_at, repeats the one the service last
stored for its stream is recorded without validating it again: it must still be refused,
applied or answered exactly as any other snapshot wherever its place, its caller or the
database says so."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.db import write_session
from devicedeck.inventory.models import IngestReceipt

from .conftest import GPU, Api, MakeApi, dev, held, listandwatch, pod, podresources

pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)

DEVICES = [dev("gpu-0", numa=[0]), dev("gpu-1", numa=[1])]
LAW = "/api/v1/ingest/listandwatch"
POD_RESOURCES = "/api/v1/ingest/podresources"


def stored_hashes(session_factory: sessionmaker[Session]) -> list[str | None]:
    with session_factory() as session:
        return list(session.scalars(select(IngestReceipt.content_hash)))


def test_a_repeat_is_unchanged_and_advances_the_stream(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 1))
    for seq in (2, 3):
        result = api.ingest_listandwatch(
            listandwatch("node-a", DEVICES, seq) | {"observed_at": f"2026-12-02T12:00:0{seq}Z"}
        )
        assert (result["changed"], result["duplicate"], result["events"]) == (False, False, 0)
    # seq 3 was recorded: it is now a repeat, and 2 is older.
    assert api.ingest_listandwatch(listandwatch("node-a", DEVICES, 3))["duplicate"] is True
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 2), expect=409)


@pytest.mark.parametrize(
    ("place", "field"),
    [
        ({"observed_at": "yesterday"}, "observed_at"),
        ({"observed_at": "2026-12-02T12:00:00"}, "observed_at"),  # no time zone
        ({"observed_at": None}, "observed_at"),
        ({"source": {"boot_id": "boot-a", "seq": -1}}, "source.seq"),
        ({"source": {"boot_id": "", "seq": 3}}, "source.boot_id"),
        ({"source": {"boot_id": "boot\x00a", "seq": 3}}, "source.boot_id"),
        ({"source": {"seq": 3}}, "source.boot_id"),
    ],
)
def test_a_repeat_with_a_bad_place_is_refused_as_any_snapshot(
    api: Api, place: dict[str, object], field: str
) -> None:
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 1))
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 2))
    error = api.ingest_listandwatch(listandwatch("node-a", DEVICES, 3) | place, expect=422)
    assert field in {detail["field"] for detail in error["error"]["details"]}, error
    # Nothing was recorded: seq 3 is still new.
    assert api.ingest_listandwatch(listandwatch("node-a", DEVICES, 3))["duplicate"] is False


def test_a_repeat_without_its_place_is_refused(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 1))
    body = listandwatch("node-a", DEVICES, 2)
    del body["observed_at"]
    error = api.ingest_listandwatch(body, expect=422)
    assert [d["field"] for d in error["error"]["details"]] == ["observed_at"]


def test_a_repeat_of_an_older_seq_or_another_boot_is_answered_as_any_snapshot(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 5))
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 6))
    assert api.ingest_listandwatch(listandwatch("node-a", DEVICES, 4), expect=409)
    assert api.ingest_listandwatch(listandwatch("node-a", DEVICES, 6))["duplicate"] is True
    # A new boot starts its sequence again; its first snapshot is accepted, and unchanged.
    rebooted = api.ingest_listandwatch(listandwatch("node-a", DEVICES, 2, boot="boot-b"))
    assert (rebooted["changed"], rebooted["duplicate"]) == (False, False)
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 1, boot="boot-b"), expect=409)


def test_a_body_that_differs_in_a_device_health_is_applied_in_full(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 1))
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 2))
    sick = [dev("gpu-0", "Unhealthy", numa=[0]), DEVICES[1]]
    result = api.ingest_listandwatch(listandwatch("node-a", sick, 3))
    assert (result["changed"], result["health_changes"]) == (True, 1)
    assert api.device("node-a", "gpu-0")["health"] == "Unhealthy"
    healed = api.ingest_listandwatch(listandwatch("node-a", DEVICES, 4))
    assert (healed["changed"], healed["health_changes"]) == (True, 1)
    assert api.device("node-a", "gpu-0")["health"] == "Healthy"


def test_a_repeat_in_another_stream_of_the_node_is_not_taken_for_this_one(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 1))
    other = api.ingest_listandwatch(listandwatch("node-a", DEVICES, 2, resource="example.com/nic"))
    assert (other["changed"], other["added"]) == (True, 2)


def test_content_another_replica_stored_takes_the_full_path(api: Api, make_api: MakeApi) -> None:
    """This process knows the body; the database knows that another replica stored other
    content since, and decides."""
    replica = make_api()
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 1))
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 2))
    grown = replica.ingest_listandwatch(listandwatch("node-a", [*DEVICES, dev("gpu-2")], 3))
    assert grown["added"] == 1
    shrunk = api.ingest_listandwatch(listandwatch("node-a", DEVICES, 4))
    assert (shrunk["changed"], shrunk["removed"]) == (True, 1)
    assert [d["device_id"] for d in api.devices(state="removed")] == ["gpu-2"]


def test_a_cleared_content_hash_takes_the_full_path(
    api: Api, session_factory: sessionmaker[Session]
) -> None:
    """Another writer forgets the stream's content (as a change made outside a snapshot
    does); the next snapshot is applied in full, and stores the content again."""
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 1))
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 2))
    [stored] = stored_hashes(session_factory)
    with write_session(session_factory) as session:
        session.execute(update(IngestReceipt).values(content_hash=None))

    result = api.ingest_listandwatch(listandwatch("node-a", DEVICES, 3))
    assert (result["changed"], result["duplicate"]) == (False, False)
    assert stored_hashes(session_factory) == [stored]


def test_a_repeat_from_a_token_bound_to_another_node_is_refused(
    api: Api, make_token: Callable[..., str]
) -> None:
    gpus = [held(GPU, "gpu-0")]
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 1))
    api.ingest_podresources(podresources("node-a", [pod("p", containers={"c": gpus})], 1))
    other = {"Authorization": f"Bearer {make_token('ingest', node='node-b')}"}
    forged = [
        (LAW, listandwatch("node-a", DEVICES, 2)),
        (POD_RESOURCES, podresources("node-a", [pod("p", containers={"c": gpus})], 2)),
    ]
    for path, body in forged:
        refused = api.client.post(path, json=body, headers=other)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "node_mismatch"
    # Both seq 2 are still new for node-a's own agent.
    assert api.ingest_listandwatch(forged[0][1])["duplicate"] is False
    assert api.ingest_podresources(forged[1][1])["duplicate"] is False


def test_a_podresources_repeat_is_unchanged_and_a_change_is_applied(api: Api) -> None:
    gpus = [held(GPU, "gpu-0")]
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 1))
    api.ingest_podresources(podresources("node-a", [pod("p", containers={"c": gpus})], 1))
    again = api.ingest_podresources(podresources("node-a", [pod("p", containers={"c": gpus})], 2))
    assert (again["changed"], again["events"]) == (False, 0)
    released = api.ingest_podresources(podresources("node-a", [], 3))
    assert (released["changed"], released["released"]) == (True, 1)
    api.ingest_podresources(podresources("node-a", [], 3, observed_at="later"), expect=422)


def test_a_repeat_with_a_query_parameter_is_refused_as_any_snapshot(api: Api) -> None:
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 1))
    refused = api.client.post(
        LAW, params={"x": "a\x00b"}, json=listandwatch("node-a", DEVICES, 2), headers=api.headers
    )
    assert refused.status_code == 422, refused.text
    assert api.ingest_listandwatch(listandwatch("node-a", DEVICES, 2))["duplicate"] is False
