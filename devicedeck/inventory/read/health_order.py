"""Device pages whose first key is the effective health (the `health` and `attention` sorts).

Effective health depends on the clock (a device on a node that stopped reporting reads Unknown,
whatever it last said), so no index holds it, and ordering by it sorted every matching device.
The devices of one health value are, though, one or two index ranges in the order of the other
keys: the devices of fresh nodes that reported that health, and for Unknown also every device of
a stale node. A page reads each range from the cursor on, in the order of the other keys, up to
the page's length, and merges them: a few pages' worth of rows whatever the fleet's size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, literal, select, union_all

from devicedeck.inventory.fields import HEALTH_VALUES, HEALTHY, UNHEALTHY, UNKNOWN
from devicedeck.inventory.models import Device, Node
from devicedeck.inventory.read.freshness import Freshness
from devicedeck.inventory.read.pagination import (
    Column,
    after_key,
    bad_cursor,
    check_limit,
    decode_cursor,
)


@dataclass(frozen=True)
class HealthFirst:
    """A sort by effective health, then `rest`: `keys` gives the value of the first sort key
    for each health (the health itself, or a rank), `rest` ends with a unique column."""

    keys: dict[str, Any]
    rest: Sequence[Column]

    def page_order(self, descending: bool) -> list[tuple[str, Any]]:
        """(health, key value) in the order a page lists them."""
        return sorted(self.keys.items(), key=lambda item: item[1], reverse=descending)


HEALTH_SORT = HealthFirst(
    {health: health for health in HEALTH_VALUES},
    (Device.node_name, Device.resource, Device.device_id, Device.id),
)
# Unhealthy first, then Unknown, then Healthy: the order an operator reads them in.
ATTENTION_SORT = HealthFirst(
    {UNHEALTHY: 0, UNKNOWN: 1, HEALTHY: 2},
    (Device.node_name, Device.resource, Device.device_id, Device.id),
)


def _ranges(health: str, clock: Freshness) -> list[list[ColumnElement[bool]]]:
    """The conditions of each index range whose devices read `health` at `clock`."""
    fresh = Node.last_seen >= clock.cutoff
    ranges = [[fresh, Device.health == health]]
    if health == UNKNOWN:
        ranges.append([Node.last_seen < clock.cutoff])
    return ranges


def cursor_position(
    order: HealthFirst, sort: str, descending: bool, cursor: str
) -> tuple[int, list[Any]]:
    """The position of the cursor's health in page order, and the rest of its key. Only a
    first key this API writes is taken (a health, or an attention rank): which ranges follow
    the cursor is decided from it."""
    values = decode_cursor(cursor, sort, 1 + len(order.rest))
    for position, (_, key) in enumerate(order.page_order(descending)):
        if type(key) is type(values[0]) and key == values[0]:
            return position, values[1:]
    raise bad_cursor("holds a key this API did not write")


def health_first_query(
    order: HealthFirst,
    sort: str,
    descending: bool,
    conditions: list[ColumnElement[bool]],
    health_filter: str | None,
    clock: Freshness,
    cursor: str | None,
    limit: int,
) -> Select[Any] | None:
    """Ids and key values of the page's devices and one more (whose presence says another page
    follows), in page order, as the columns `id`, `k0` (the first key) and `k1`... (`rest`).
    None when no device can follow the cursor."""
    check_limit(limit)
    ordered = order.page_order(descending)
    start, after = 0, None
    if cursor:
        start, rest_values = cursor_position(order, sort, descending, cursor)
        after = after_key(order.rest, rest_values, descending)
    rest = [column.desc() if descending else column for column in order.rest]
    parts = []
    for position, (health, key) in enumerate(ordered):
        if position < start or (health_filter is not None and health != health_filter):
            continue
        where = [*conditions, after] if after is not None and position == start else conditions
        for extra in _ranges(health, clock):
            part = (
                select(
                    Device.id.label("id"),
                    literal(key).label("k0"),
                    *(column.label(f"k{i}") for i, column in enumerate(order.rest, 1)),
                )
                .join(Node, Node.id == Device.node_id)
                .where(*where, *extra)
                .order_by(*rest)
                .limit(limit + 1)
                .subquery()
            )
            parts.append(select(part))
    if not parts:
        return None
    merged = (parts[0] if len(parts) == 1 else union_all(*parts)).subquery()
    keys = [merged.c[f"k{i}"] for i in range(len(order.rest) + 1)]
    return (
        select(merged)
        .order_by(*(key.desc() if descending else key for key in keys))
        .limit(limit + 1)
    )
