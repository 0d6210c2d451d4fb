"""Histories: the event feed, and a device's health and allocation history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from devicedeck.clock import iso
from devicedeck.inventory.errors import InvalidInput, Problem
from devicedeck.inventory.events import EVENT_KINDS
from devicedeck.inventory.models import (
    Allocation,
    Event,
)
from devicedeck.inventory.read.conditions import equal_where_given
from devicedeck.inventory.read.pagination import Keyset, Page

HEALTH_EVENT_KINDS = ("device_added", "health_changed", "device_removed", "device_reappeared")
HISTORY_LIMIT = 500


def event_summary(event: Event) -> dict[str, Any]:
    return {
        "id": event.id,
        "at": iso(event.at),
        "kind": event.kind,
        "node": event.node,
        "resource": event.resource,
        "device_id": event.device_id,
        "device": event.device_pk,
        "namespace": event.namespace,
        "pod": event.pod,
        "container": event.container,
        "before": event.before,
        "after": event.after,
        "actor": event.actor,
    }


@dataclass(frozen=True)
class EventFilters:
    node: str | None = None
    resource: str | None = None
    kind: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    device: int | None = None
    device_id: str | None = None
    namespace: str | None = None
    pod: str | None = None
    after_id: int | None = None


def _check_moment(name: str, moment: datetime | None) -> None:
    if moment is None:
        return
    if moment.tzinfo is None:
        raise InvalidInput(
            f"{name} needs a time zone",
            [Problem(name, "timezone_aware", "must carry a UTC offset, e.g. 2026-12-02T10:00:00Z")],
        )
    try:
        moment.astimezone(UTC)
    except OverflowError as e:
        raise InvalidInput(
            f"{name} is out of range",
            [Problem(name, "range", "must be a time between years 1 and 9999 in UTC")],
        ) from e


def _event_conditions(filters: EventFilters) -> list[ColumnElement[bool]]:
    if filters.kind is not None and filters.kind not in EVENT_KINDS:
        raise InvalidInput(
            "kind is not an event kind",
            [Problem("kind", "enum", f"must be one of {', '.join(EVENT_KINDS)}")],
        )
    for name in ("since", "until"):
        _check_moment(name, getattr(filters, name))
    conditions = equal_where_given(
        (Event.node, filters.node),
        (Event.resource, filters.resource),
        (Event.kind, filters.kind),
        (Event.device_pk, filters.device),
        (Event.device_id, filters.device_id),
        (Event.namespace, filters.namespace),
        (Event.pod, filters.pod),
    )
    if filters.since is not None:
        conditions.append(Event.at >= filters.since)
    if filters.until is not None:
        conditions.append(Event.at <= filters.until)
    if filters.after_id is not None:
        conditions.append(Event.id > filters.after_id)
    return conditions


_NEWEST_FIRST = Keyset("-id", [Event.id], descending=True)


def list_events(
    session: Session, filters: EventFilters, *, cursor: str | None = None, limit: int = 50
) -> Page[dict[str, Any]]:
    """Events, newest first. The count is left out: the log grows without bound."""
    query = _NEWEST_FIRST.page_query(
        select(Event).where(*_event_conditions(filters)), cursor, limit
    )
    events, next_cursor = _NEWEST_FIRST.cut(session.scalars(query).all(), limit, lambda e: [e.id])
    return Page(items=[event_summary(e) for e in events], next_cursor=next_cursor, count=None)


def latest_event_id(session: Session) -> int:
    return session.scalar(select(Event.id).order_by(Event.id.desc()).limit(1)) or 0


def device_history(session: Session, device_pk: int) -> dict[str, Any]:
    health = session.scalars(
        select(Event)
        .where(Event.device_pk == device_pk, Event.kind.in_(HEALTH_EVENT_KINDS))
        .order_by(Event.id.desc())
        .limit(HISTORY_LIMIT)
    )
    allocations = session.scalars(
        select(Allocation)
        .where(Allocation.device_pk == device_pk)
        .order_by(Allocation.started.desc(), Allocation.id.desc())
        .limit(HISTORY_LIMIT)
    )
    return {
        "health_history": [
            {
                "at": iso(e.at),
                "kind": e.kind,
                "health": (e.after or {}).get("health"),
                "raw_health": (e.after or {}).get("raw_health"),
                "state": (e.after or {}).get("state"),
                "actor": e.actor,
            }
            for e in health
        ],
        "allocation_history": [
            {
                "namespace": a.namespace,
                "pod": a.pod,
                "pod_uid": a.pod_uid,
                "container": a.container,
                "started": iso(a.started),
                "ended": iso(a.ended),
            }
            for a in allocations
        ],
    }
