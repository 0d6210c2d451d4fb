"""`?format=csv` on list routes: every matching row, streamed, with the same filters as JSON.

The first page is read before the response starts, so a filter that breaks a rule still gets
the API's 422. The rest is read a page at a time, each in a short session of its own, while the
response streams: the request's session may be closed by then, and a long export must not hold
one transaction open.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator
from typing import Any, Literal

from fastapi import Request
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.api.envelope import envelope
from devicedeck.inventory.read.pagination import MAX_LIMIT, Page

Format = Literal["json", "csv"]
FetchPage = Callable[[Session, str | None, int], Page[dict[str, Any]]]

DEVICE_COLUMNS = (
    "id", "node", "resource", "device_id", "health", "raw_health", "health_source",
    "health_detail", "state", "numa_nodes", "first_seen", "last_seen", "removed_at",
    "health_changed_at", "node_stale",
    "allocation.namespace", "allocation.pod", "allocation.container", "allocation.pod_uid",
    "allocation.started",
)  # fmt: skip
EVENT_COLUMNS = (
    "id", "at", "kind", "node", "resource", "device_id", "device", "namespace", "pod",
    "container", "before", "after", "actor",
)  # fmt: skip
# A spreadsheet runs a cell that starts with one of these as a formula; device IDs and pod
# names come from outside, so such a cell is written with a leading apostrophe.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, separators=(",", ":"), sort_keys=True)
    else:
        text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _field(item: dict[str, Any], column: str) -> Any:
    value: Any = item
    for part in column.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def csv_response(
    factory: sessionmaker[Session],
    first: Page[dict[str, Any]],
    fetch: FetchPage,
    columns: tuple[str, ...],
    filename: str,
) -> StreamingResponse:
    def rows() -> Iterator[str]:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\r\n")
        writer.writerow(columns)
        page = first
        while True:
            for item in page.items:
                writer.writerow([cell(_field(item, column)) for column in columns])
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
            if page.next_cursor is None:
                return
            with factory() as session:
                page = fetch(session, page.next_cursor, MAX_LIMIT)

    return StreamingResponse(
        rows(),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


def page_or_csv(
    request: Request,
    session: Session,
    factory: sessionmaker[Session],
    fetch: FetchPage,
    *,
    format: Format,
    cursor: str | None,
    limit: int,
    columns: tuple[str, ...],
    filename: str,
) -> dict[str, Any] | StreamingResponse:
    """A list route's answer: one page in the list envelope, or with `format=csv` every row."""
    if format == "csv":
        return csv_response(factory, fetch(session, cursor, MAX_LIMIT), fetch, columns, filename)
    return envelope(request, fetch(session, cursor, limit))
