"""The watch list: devices an operator has marked for return (to drain and send back), with
who marked each, when, and an optional note. Marks go with the device's row; a device that is
removed keeps its mark, since it is the device that goes back, not its slot.

`marks_for` answers for a set of devices at once, so a list of devices (a ranking) can show
which of its rows are marked with one statement."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from devicedeck.clock import iso
from devicedeck.inventory.errors import InvalidInput, NotFound, Problem
from devicedeck.inventory.models import Device, Node, WatchMark
from devicedeck.inventory.read.pagination import Keyset, Page, among
from devicedeck.kubelet import names

NOTE_MAX = 500


def check_note(note: str | None) -> str | None:
    """The note as stored: stripped, None when empty; InvalidInput naming the rule when it is
    too long or holds text the database cannot keep."""
    if note is None or not note.strip():
        return None
    note = note.strip()
    if len(note) > NOTE_MAX:
        raise InvalidInput(
            f"note must be at most {NOTE_MAX} characters",
            [Problem("note", "max_length", f"must be at most {NOTE_MAX} characters")],
        )
    problem = "must not contain NUL characters" if "\x00" in note else names.text_problem(note)
    if problem:
        raise InvalidInput(f"note {problem}", [Problem("note", "text", problem)])
    return note


def _mark_out(mark: WatchMark) -> dict[str, Any]:
    return {"marked_by": mark.marked_by, "marked_at": iso(mark.marked_at), "note": mark.note}


def mark_device(
    session: Session, device_pk: int, *, actor: str, now: datetime, note: str | None
) -> dict[str, Any]:
    """Put the device on the watch list, or replace its mark (who, when, note) if it is there."""
    note = check_note(note)
    if session.get(Device, device_pk) is None:
        raise NotFound(f"no device with id {device_pk}")
    mark = session.get(WatchMark, device_pk)
    if mark is None:
        mark = WatchMark(device_pk=device_pk)
        session.add(mark)
    mark.marked_by, mark.marked_at, mark.note = actor, now, note
    session.flush()
    return get_watched_device(session, device_pk)


def unmark_device(session: Session, device_pk: int) -> bool:
    """Take the device off the watch list; whether it was on it. NotFound for no such device."""
    if session.get(Device, device_pk) is None:
        raise NotFound(f"no device with id {device_pk}")
    mark = session.get(WatchMark, device_pk)
    if mark is None:
        return False
    session.delete(mark)
    return True


def marks_for(session: Session, device_pks: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The marks of those of `device_pks` that are on the watch list, by device id."""
    keys = sorted(set(device_pks))
    if not keys:
        return {}
    query = select(WatchMark).where(among(session, WatchMark.device_pk, keys))
    return {mark.device_pk: _mark_out(mark) for mark in session.scalars(query)}


def mark_of(session: Session, device_pk: int) -> dict[str, Any] | None:
    mark = session.get(WatchMark, device_pk)
    return None if mark is None else _mark_out(mark)


_LIST = (
    select(WatchMark)
    .add_columns(Device, Node.name)
    .join(Device, Device.id == WatchMark.device_pk)
    .join(Node, Node.id == Device.node_id)
)
# Newest mark first; the device id breaks ties.
_ORDER = Keyset("marked_at", (WatchMark.marked_at, WatchMark.device_pk), descending=True)


def _row(mark: WatchMark, device: Device, node: str) -> dict[str, Any]:
    return {
        "id": device.id,
        "node": node,
        "resource": device.resource,
        "device_id": device.device_id,
        "health": device.health,
        "state": device.state,
        "unhealthy_transitions": device.unhealthy_transitions,
        **_mark_out(mark),
    }


def get_watched_device(session: Session, device_pk: int) -> dict[str, Any]:
    found = session.execute(_LIST.where(WatchMark.device_pk == device_pk)).one_or_none()
    if found is None:
        if session.get(Device, device_pk) is None:
            raise NotFound(f"no device with id {device_pk}")
        raise NotFound(f"device {device_pk} is not on the watch list")
    return _row(*found)


def list_watchlist(
    session: Session, *, cursor: str | None = None, limit: int = 50
) -> Page[dict[str, Any]]:
    """The watch list, newest mark first, with each device's node, health and state now."""
    rows = session.execute(_ORDER.page_query(_LIST, cursor, limit)).all()
    page, next_cursor = _ORDER.cut(
        rows, limit, lambda row: [row[0].marked_at.isoformat(), row[0].device_pk]
    )
    count = session.scalar(select(func.count()).select_from(WatchMark))
    items = [_row(mark, device, node) for mark, device, node in page]
    return Page(items=items, next_cursor=next_cursor, count=count)
