"""Unchanged snapshots that arrive while one unchanged-snapshot statement is in flight go
together as the next statement: each must be answered, recorded or refused, exactly as it would
have been on its own."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.db import write_session
from devicedeck.inventory.errors import StaleSnapshot
from devicedeck.inventory.models import IngestReceipt, Node
from devicedeck.inventory.schemas import ListAndWatchSnapshot, PodResourcesSnapshot
from devicedeck.inventory.write.ingest import IngestResult, SnapshotIngest

from .conftest import GPU, Api, StatementCounter, dev, held, listandwatch, pod, podresources

pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)

DEVICES = [dev("gpu-0"), dev("gpu-1")]
Snapshot = ListAndWatchSnapshot | PodResourcesSnapshot


def at_once(api: Api, bodies: list[dict[str, Any]]) -> list[IngestResult | BaseException]:
    """The snapshots handed to ingest together, in this order, before any statement runs: the
    first goes alone; the others queue while it is in flight and go as one statement."""
    state = api.client.app.state  # type: ignore[attr-defined]
    ingest: SnapshotIngest = state.ingest
    snapshots: list[Snapshot] = [
        PodResourcesSnapshot.model_validate(body)
        if "pod_resources" in body
        else ListAndWatchSnapshot.model_validate(body)
        for body in bodies
    ]

    async def apply_all() -> list[IngestResult | BaseException]:
        return await asyncio.gather(
            *(ingest.apply(s, actor="agent", body_bytes=None) for s in snapshots),
            return_exceptions=True,
        )

    results: list[IngestResult | BaseException] = api.client.portal.call(apply_all)
    return results


def repeats(*places: tuple[str, int]) -> list[dict[str, Any]]:
    """The same device list from each (node, seq)."""
    return [listandwatch(node, DEVICES, seq) for node, seq in places]


def receipts(session_factory: sessionmaker[Session]) -> dict[tuple[str, str], tuple[int, str]]:
    """(node, stream) -> (seq, observed_at) of every stream's receipt."""
    with session_factory() as session:
        rows = session.execute(
            select(
                Node.name, IngestReceipt.stream, IngestReceipt.seq, IngestReceipt.observed_at
            ).join(Node, Node.id == IngestReceipt.node_id)
        ).all()
    return {(node, stream): (seq, f"{observed:%H:%M:%S}") for node, stream, seq, observed in rows}


def last_seen(session_factory: sessionmaker[Session]) -> dict[str, datetime]:
    with session_factory() as session:
        return {name: seen for name, seen in session.execute(select(Node.name, Node.last_seen))}


def observed(second: int) -> str:
    return f"2026-12-02T12:00:{second:02d}Z"


def test_many_repeats_at_once_are_each_recorded_with_their_own_place(
    quiet_api: Api, statements: StatementCounter, session_factory: sessionmaker[Session]
) -> None:
    api = quiet_api
    nodes = [f"node-{n:02d}" for n in range(12)]
    for node in nodes:
        api.ingest_listandwatch(listandwatch(node, DEVICES, 1))
    seen = last_seen(session_factory)
    with statements:
        results = at_once(
            api,
            [
                listandwatch(node, DEVICES, 10 + n, observed_at=observed(n))
                for n, node in enumerate(nodes)
            ],
        )
    assert results == [IngestResult()] * len(nodes)
    # The unchanged statement recorded them all; none took the full path.
    assert statements.statements == []
    stream = f"listandwatch/{GPU}"
    assert receipts(session_factory) == {
        (node, stream): (10 + n, f"12:00:{n:02d}") for n, node in enumerate(nodes)
    }
    now_seen = last_seen(session_factory)
    assert all(now_seen[node] > seen[node] for node in nodes)


def test_two_streams_of_a_node_at_once_are_both_recorded(
    quiet_api: Api, statements: StatementCounter, session_factory: sessionmaker[Session]
) -> None:
    api = quiet_api
    pods = [pod("p", containers={"c": [held(GPU, "gpu-0")]})]
    api.ingest_listandwatch(listandwatch("node-a", DEVICES, 1))
    api.ingest_podresources(podresources("node-a", pods, 1))
    api.ingest_listandwatch(listandwatch("node-b", DEVICES, 1))
    with statements:
        results = at_once(
            api,
            [
                listandwatch("node-b", DEVICES, 2),
                listandwatch("node-a", DEVICES, 2, observed_at=observed(2)),
                podresources("node-a", pods, 3, observed_at=observed(3)),
            ],
        )
    assert results == [IngestResult()] * 3
    assert statements.statements == []
    stored = receipts(session_factory)
    assert stored[("node-a", f"listandwatch/{GPU}")] == (2, "12:00:02")
    assert stored[("node-a", "podresources")] == (3, "12:00:03")


def test_repeats_of_one_stream_at_once_keep_the_ordering_rules(
    quiet_api: Api, statements: StatementCounter, session_factory: sessionmaker[Session]
) -> None:
    api = quiet_api
    for node in ("node-a", "node-b", "node-c"):
        api.ingest_listandwatch(listandwatch(node, DEVICES, 1))
        api.ingest_listandwatch(listandwatch(node, DEVICES, 2))
    # node-b's snapshot goes first and alone; the rest queue behind it. Of one stream's, each
    # comes after the one before it, as if sent one by one: each newer seq is recorded by the
    # unchanged statement, none needs the full path.
    with statements:
        results = at_once(
            api,
            repeats(("node-b", 3), ("node-a", 4), ("node-a", 5), ("node-c", 4), ("node-a", 6)),
        )
    assert results == [IngestResult()] * 5
    assert statements.statements == []
    # An older seq is refused, the same seq again is a repeat.
    results = at_once(
        api, repeats(("node-b", 4), ("node-a", 7), ("node-c", 7), ("node-c", 6), ("node-a", 7))
    )
    assert results[:3] == [IngestResult()] * 3
    assert isinstance(results[3], StaleSnapshot)
    assert results[4] == IngestResult(duplicate=True)
    stored = receipts(session_factory)
    assert [stored[(node, f"listandwatch/{GPU}")][0] for node in ("node-a", "node-c")] == [7, 7]


def test_a_snapshot_that_does_not_apply_takes_the_full_path_and_leaves_the_others_recorded(
    quiet_api: Api, session_factory: sessionmaker[Session]
) -> None:
    api = quiet_api
    for node in ("node-a", "node-b", "node-c", "node-d"):
        api.ingest_listandwatch(listandwatch(node, DEVICES, 5))
    # Another writer changed node-c's devices: its stream's content is forgotten.
    with write_session(session_factory) as session:
        node_c = session.scalar(select(Node.id).where(Node.name == "node-c"))
        session.execute(
            update(IngestReceipt).where(IngestReceipt.node_id == node_c).values(content_hash=None)
        )
    results = at_once(
        api,
        [
            listandwatch("node-d", DEVICES, 6),
            listandwatch("node-a", DEVICES, 6),
            listandwatch("node-b", DEVICES, 4),  # older: refused
            listandwatch("node-c", DEVICES, 6),  # applied in full, and found unchanged
            listandwatch("node-d", DEVICES, 5),  # older than the 6 queued before it
            listandwatch("node-b", DEVICES, 5),  # the last seq again
        ],
    )
    assert results[:2] == [IngestResult()] * 2
    assert isinstance(results[2], StaleSnapshot)
    assert results[3] == IngestResult()
    assert isinstance(results[4], StaleSnapshot)
    assert results[5] == IngestResult(duplicate=True)
    stream = f"listandwatch/{GPU}"
    stored = receipts(session_factory)
    assert {
        node: stored[(node, stream)][0] for node in ("node-a", "node-b", "node-c", "node-d")
    } == {
        "node-a": 6,
        "node-b": 5,
        "node-c": 6,
        "node-d": 6,
    }
    # node-c's content is known again: its next snapshot is recorded by the statement.
    assert at_once(api, [listandwatch("node-c", DEVICES, 7)]) == [IngestResult()]


def test_a_queued_snapshot_whose_request_ends_does_not_hold_up_the_others(
    quiet_api: Api, session_factory: sessionmaker[Session]
) -> None:
    """The request first in the queue would send the next statement; it goes away (its client
    hung up), and the next one sends it instead."""
    api = quiet_api
    nodes = ["node-a", "node-b", "node-c", "node-d"]
    for node in nodes:
        api.ingest_listandwatch(listandwatch(node, DEVICES, 1))
    ingest: SnapshotIngest = api.client.app.state.ingest  # type: ignore[attr-defined]
    snapshots = [ListAndWatchSnapshot.model_validate(listandwatch(n, DEVICES, 2)) for n in nodes]

    async def one_gone() -> list[IngestResult | BaseException]:
        applying = [
            asyncio.create_task(ingest.apply(s, actor="agent", body_bytes=None)) for s in snapshots
        ]
        await asyncio.sleep(0)  # each is in the queue, or sending, now
        applying[1].cancel()
        return await asyncio.wait_for(asyncio.gather(*applying, return_exceptions=True), 30)

    results = api.client.portal.call(one_gone)
    assert isinstance(results[1], asyncio.CancelledError)
    assert [results[0], *results[2:]] == [IngestResult()] * 3
    stream = f"listandwatch/{GPU}"
    stored = receipts(session_factory)
    assert [stored[(node, stream)][0] for node in nodes] == [2, 1, 2, 2]
