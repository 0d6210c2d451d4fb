"""The plan a snapshot gets from its stream's receipt, the one decision every ingest route
carries out."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from devicedeck.inventory.errors import ConflictingRepeat, StaleSnapshot
from devicedeck.inventory.schemas import SnapshotPlace
from devicedeck.inventory.write.decision import Plan, plan_snapshot
from devicedeck.inventory.write.device_lists import _STREAM_OF_NODE, StreamRow
from devicedeck.inventory.write.receipts import StreamReceipt

STREAM = "listandwatch/example.com/gpu"
BOOT_STARTED = datetime(2026, 12, 2, 11, 0, tzinfo=UTC)


def place(seq: int, boot: str = "boot-2", started: datetime | None = BOOT_STARTED) -> SnapshotPlace:
    return SnapshotPlace.model_validate(
        {
            "node": "node-a",
            "source": {"boot_id": boot, "seq": seq, "boot_started_at": started},
            "observed_at": "2026-12-02T12:00:00Z",
        }
    )


def receipt(content_hash: str | None = "h1") -> StreamReceipt:
    return StreamReceipt(7, "boot-2", 5, "h1", content_hash, BOOT_STARTED)


def plan(stored: StreamReceipt | None, snapshot: SnapshotPlace, content_hash: str) -> Plan:
    return plan_snapshot(stored, snapshot, stream=STREAM, content_hash=content_hash)


def test_a_streams_first_snapshot_is_applied() -> None:
    assert plan(None, place(0), "h1") is Plan.APPLY_CHANGES


def test_a_newer_seq_with_the_stored_content_only_advances_the_receipt() -> None:
    assert plan(receipt(), place(6), "h1") is Plan.ADVANCE_RECEIPT


def test_new_content_is_applied() -> None:
    assert plan(receipt(), place(6), "h2") is Plan.APPLY_CHANGES


def test_content_another_writer_changed_is_applied_again() -> None:
    # Another writer cleared the content hash: the rows are no longer what h1 made them.
    assert plan(receipt(content_hash=None), place(6), "h1") is Plan.APPLY_CHANGES


def test_the_last_seq_again_is_answered_from_the_receipt() -> None:
    assert plan(receipt(), place(5), "h1") is Plan.ANSWER_REPEAT


def test_a_snapshot_of_an_earlier_boot_is_answered_late() -> None:
    earlier = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    assert plan(receipt(), place(9, boot="boot-1", started=earlier), "h1") is Plan.ANSWER_LATE


def test_a_later_boot_with_the_stored_content_advances_by_the_full_path_rules() -> None:
    later = datetime(2026, 12, 2, 11, 30, tzinfo=UTC)
    # Another boot starts a new sequence; its content is what the stream holds.
    assert plan(receipt(), place(0, boot="boot-3", started=later), "h1") is Plan.ADVANCE_RECEIPT


def test_an_older_seq_and_a_reused_seq_are_refused() -> None:
    with pytest.raises(StaleSnapshot):
        plan(receipt(), place(4), "h1")
    with pytest.raises(ConflictingRepeat):
        plan(receipt(), place(5), "h2")


def test_a_stream_row_names_each_column_of_the_streams_read() -> None:
    # The receipt's columns, then a device's, then the count read by the node's name.
    columns = list(_STREAM_OF_NODE.selected_columns.keys())
    renamed = {"receipt_id": "id", "device_row_id": "id_1"}
    assert [renamed.get(field, field) for field in StreamRow._fields] == [
        *columns,
        "present_elsewhere",
    ]
