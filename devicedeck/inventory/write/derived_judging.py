"""The derived-health rule (devicedeck/inventory/write/derived_health.py) on stored rows: the Node's
last judged observation per resource, and the node-level event that says what the counts
tell when they cannot name the devices. Used by a derived snapshot's full path and by the
cluster watcher when a Node's status changes, so both judge from the same inputs."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from devicedeck.inventory.events import EventLog
from devicedeck.inventory.write.derived_health import Basis, Judgement, StatusCounts, judge

_SUMMARY = "summary"


def judge_stored(
    stored: Mapping[str, Any] | None,
    resource: str,
    *,
    known: Collection[str],
    offered: Collection[str],
    removed: Collection[str],
    counts: StatusCounts | None,
    after_gap: bool = False,
) -> Judgement:
    """`judge` against the basis stored for `resource` in a node's `derived_basis`."""
    entry = (stored or {}).get(resource)
    return judge(Basis.from_json(entry), known, offered, counts, removed, after_gap=after_gap)


def stored_after(
    stored: Mapping[str, Any] | None,
    resource: str,
    judgement: Judgement,
    log: EventLog,
    node: str,
) -> dict[str, Any] | None:
    """The node's `derived_basis` after `judgement`, None when it does not change; logs a
    `devices_counted` event when what the counts say of the devices they cannot name changes
    (only judged observations say anything)."""
    entry = dict((stored or {}).get(resource) or {})
    if judgement.counts is None or judgement.basis is None:
        return None
    before = entry.get(_SUMMARY)
    summary = judgement.summary()
    updated = {**judgement.basis.to_json(), _SUMMARY: summary}
    if summary != before:
        log.add(
            "devices_counted",
            node=node,
            resource=resource,
            before=before,
            after=summary or {"unhealthy": None, "removed": None, "among": []},
        )
    if updated == entry:
        return None
    return {**(stored or {}), resource: updated}
