"""What a snapshot does to its stream, decided in one place from the stream's stored receipt.

Every route a snapshot can take (the early answer to a repeat, the unchanged-snapshot
statement, the two round trips on the driver's connection, the full path) carries out the plan
`plan_snapshot` returns for the receipt it reads; none of them decides on its own. The
unchanged-snapshot statement cannot call Python inside the database: its WHERE clause
(receipts.py) is the ADVANCE_RECEIPT case below written in SQL, and anything it does not match
goes to a route that reads the receipt and asks here.
"""

from __future__ import annotations

from enum import StrEnum

from devicedeck.inventory.schemas import Placed
from devicedeck.inventory.write.receipts import Order, StreamReceipt, check_order


class Plan(StrEnum):
    # The stream's last seq again, with its content: nothing is written for the stream, the
    # answer comes from the receipt.
    ANSWER_REPEAT = "answer_repeat"
    # From a boot that began before the stream's: nothing is written for the stream.
    ANSWER_LATE = "answer_late"
    # A newer place with the content last applied: only the receipt moves on.
    ADVANCE_RECEIPT = "advance_receipt"
    # New content (or a stream's first snapshot, or content another writer invalidated): what
    # the stream owns is replaced, then the receipt records the snapshot.
    APPLY_CHANGES = "apply_changes"


def plan_snapshot(
    receipt: StreamReceipt | None, snapshot: Placed, *, stream: str, content_hash: str
) -> Plan:
    """The plan for `snapshot`, of content `content_hash`, against its stream's receipt (None
    before the stream's first snapshot). Pure: it reads nothing but its arguments.

    Raises what `check_order` raises (an older seq, a seq reused with other content)."""
    order = check_order(receipt, snapshot.source, content_hash, stream)
    if order is Order.REPEAT:
        return Plan.ANSWER_REPEAT
    if order is Order.LATE:
        return Plan.ANSWER_LATE
    if receipt is not None and receipt.content_hash == content_hash:
        return Plan.ADVANCE_RECEIPT
    return Plan.APPLY_CHANGES
