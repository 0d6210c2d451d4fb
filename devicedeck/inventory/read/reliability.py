"""Reliability figures: which devices fail, recover and fail again, and what it cost.

The question behind it: "which devices should I drain and send back, and how many jobs did each
cost us?". Per device and window: how often its reported health turned Unhealthy, for how long
it stayed so, how often it was removed, the mean time between failures, and the pods that held
it while it was Unhealthy. Figures are read from `device_incidents` (spells of Unhealthy and of
removal, kept by a trigger on the change log) and from the allocations of the devices that had
a spell in the window, so the cost follows the number of failing devices, not the fleet's size.
Each spell is cut to the window, so a figure is exact for any window, not rounded to days.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    and_,
    case,
    cast,
    extract,
    func,
    literal,
    or_,
    select,
    tuple_,
)
from sqlalchemy.orm import Session

from devicedeck.clock import iso
from devicedeck.inventory.errors import InvalidInput, NotFound, Problem
from devicedeck.inventory.models import (
    Allocation,
    Device,
    DeviceIncident,
    Node,
    UtcDateTime,
)
from devicedeck.inventory.read.pagination import (
    MAX_KEY,
    Page,
    bad_cursor,
    check_limit,
    decode_cursor,
    encode_cursor,
)

WINDOWS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}
DEFAULT_WINDOW = "7d"
LONGEST_WINDOW = timedelta(days=366)
# A device flaps when its health turned Unhealthy this often within the last 24 hours.
FLAP_FAILURES = 2
FLAP_WINDOW = timedelta(hours=24)
UNHEALTHY_SPELL = "unhealthy"
REMOVED_SPELL = "removed"
# Device ids per query for the holds of the ranked devices (SQLite takes at most 32,766
# parameters in a statement).
CHUNK = 5000


@dataclass(frozen=True)
class Window:
    """[since, until): `name` is 24h, 7d or 30d, or None for one given by its ends."""

    since: datetime
    until: datetime
    name: str | None = None

    @property
    def seconds(self) -> float:
        return (self.until - self.since).total_seconds()

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "since": iso(self.since), "until": iso(self.until)}


def _aware(name: str, moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise InvalidInput(
            f"{name} needs a time zone",
            [Problem(name, "timezone_aware", "must carry a UTC offset, e.g. 2026-12-02T10:00:00Z")],
        )
    try:
        return moment.astimezone(UTC)
    except OverflowError as e:
        raise InvalidInput(
            f"{name} is out of range",
            [Problem(name, "range", "must be a time between years 1 and 9999 in UTC")],
        ) from e


def choose_window(
    now: datetime,
    window: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Window:
    """The window a request asks for: a named one ending now (7d unless told), or since/until.
    An end in the future is now: nothing is known past it."""
    if since is None and until is None:
        name = window or DEFAULT_WINDOW
        if name not in WINDOWS:
            raise InvalidInput(
                "window is not a known window",
                [Problem("window", "enum", f"must be one of {', '.join(WINDOWS)}")],
            )
        return Window(now - WINDOWS[name], now, name)
    if window is not None:
        raise InvalidInput(
            "give a window or since/until, not both",
            [Problem("window", "exclusive", "leave it out when since or until is given")],
        )
    end = min(_aware("until", until), now) if until is not None else now
    if since is None:
        raise InvalidInput(
            "since is missing", [Problem("since", "required", "is needed with until")]
        )
    start = _aware("since", since)
    if start >= end:
        raise InvalidInput(
            "since must come before until and before now",
            [Problem("since", "before_until", "must be earlier than until and than now")],
        )
    if end - start > LONGEST_WINDOW:
        raise InvalidInput(
            "the window is too long",
            [Problem("since", "range", f"must be at most {LONGEST_WINDOW.days} days before until")],
        )
    return Window(start, end, None)


@dataclass(frozen=True)
class Spell:
    kind: str
    started: datetime
    ended: datetime | None


@dataclass(frozen=True)
class Hold:
    namespace: str
    pod: str
    started: datetime
    ended: datetime | None


def _cut(start: datetime, end: datetime | None, window: Window) -> tuple[datetime, datetime]:
    return max(start, window.since), min(end or window.until, window.until)


@dataclass
class Figures:
    """One device's figures over a window."""

    failures: int = 0
    removals: int = 0
    unhealthy_seconds: float = 0.0
    observed_seconds: float = 0.0
    pods_hit: list[str] = field(default_factory=list)
    pods_held: int = 0

    @property
    def unhealthy_share(self) -> float:
        if self.observed_seconds <= 0:
            return 0.0
        return round(self.unhealthy_seconds / self.observed_seconds, 6)

    @property
    def mtbf_seconds(self) -> float | None:
        """Time healthy in the window per failure; None without a failure."""
        if not self.failures:
            return None
        return round((self.observed_seconds - self.unhealthy_seconds) / self.failures, 3)

    def as_dict(self) -> dict[str, Any]:
        return {
            "failures": self.failures,
            "unhealthy_seconds": round(self.unhealthy_seconds, 3),
            "unhealthy_share": self.unhealthy_share,
            "removals": self.removals,
            "mtbf_seconds": self.mtbf_seconds,
            "pods_hit": len(self.pods_hit),
            "pods_hit_names": self.pods_hit,
            "pods_held": self.pods_held,
        }


def figures_of(
    spells: Iterable[Spell], holds: Iterable[Hold], window: Window, first_seen: datetime
) -> Figures:
    """The figures from one device's spells and holds that reach into the window."""
    figures = Figures()
    figures.observed_seconds = max(
        0.0, (window.until - max(window.since, first_seen)).total_seconds()
    )
    sick: list[tuple[datetime, datetime]] = []
    for spell in spells:
        starts_inside = window.since <= spell.started < window.until
        if spell.kind == REMOVED_SPELL:
            figures.removals += starts_inside
            continue
        figures.failures += starts_inside
        start, end = _cut(spell.started, spell.ended, window)
        if start < end:
            sick.append((start, end))
            figures.unhealthy_seconds += (end - start).total_seconds()
    held: set[str] = set()
    hit: set[str] = set()
    for hold in holds:
        start, end = _cut(hold.started, hold.ended, window)
        if start >= end:
            continue
        name = f"{hold.namespace}/{hold.pod}"
        held.add(name)
        if any(start < sick_end and end > sick_start for sick_start, sick_end in sick):
            hit.add(name)
    figures.pods_held = len(held)
    figures.pods_hit = sorted(hit)
    return figures


@dataclass(frozen=True)
class ReliabilityFilters:
    node: str | None = None
    node_prefix: str | None = None
    resource: str | None = None
    # Devices a pod of this namespace held in the window.
    namespace: str | None = None


@dataclass
class _Device:
    id: int
    node: str
    resource: str
    device_id: str
    first_seen: datetime
    spells: list[Spell] = field(default_factory=list)
    holds: list[Hold] = field(default_factory=list)


def _overlapping(model: type[DeviceIncident] | type[Allocation], window: Window) -> list[Any]:
    return [
        model.started < window.until,
        or_(model.ended.is_(None), model.ended > window.since),
    ]


def _spell_conditions(filters: ReliabilityFilters, window: Window) -> list[ColumnElement[bool]]:
    i = DeviceIncident
    conditions: list[ColumnElement[bool]] = []
    if filters.node is not None:
        conditions.append(i.node == filters.node)
    if filters.node_prefix:
        conditions.append(i.node.startswith(filters.node_prefix, autoescape=True))
    if filters.resource is not None:
        conditions.append(i.resource == filters.resource)
    if filters.namespace is not None:
        a = Allocation
        held_there = select(a.device_pk).where(
            a.namespace == filters.namespace, *_overlapping(a, window)
        )
        conditions.append(i.device_pk.in_(held_there))
    return conditions


def _troubled_devices(
    session: Session, window: Window, device_pks: list[int]
) -> dict[int, _Device]:
    """Of these devices, those with a spell in the window, their spells and their holds in it."""
    rows = session.execute(
        select(
            Device.id,
            Device.node_name,
            Device.resource,
            Device.device_id,
            Device.first_seen,
            DeviceIncident.kind,
            DeviceIncident.started,
            DeviceIncident.ended,
        )
        .join(Device, Device.id == DeviceIncident.device_pk)
        .where(*_overlapping(DeviceIncident, window), Device.id.in_(device_pks))
        .order_by(Device.id, DeviceIncident.started)
    ).all()
    devices: dict[int, _Device] = {}
    for row in rows:
        device = devices.get(row.id)
        if device is None:
            device = devices[row.id] = _Device(
                row.id, row.node_name, row.resource, row.device_id, row.first_seen
            )
        device.spells.append(Spell(row.kind, row.started, row.ended))
    _add_holds(session, devices, window)
    return devices


def _add_holds(session: Session, devices: dict[int, _Device], window: Window) -> None:
    ids = sorted(devices)
    for start in range(0, len(ids), CHUNK):
        rows = session.execute(
            select(
                Allocation.device_pk,
                Allocation.namespace,
                Allocation.pod,
                Allocation.started,
                Allocation.ended,
            ).where(
                Allocation.device_pk.in_(ids[start : start + CHUNK]),
                *_overlapping(Allocation, window),
            )
        )
        for row in rows:
            devices[row.device_pk].holds.append(
                Hold(row.namespace, row.pod, row.started, row.ended)
            )


def _device_row(device: _Device, window: Window) -> dict[str, Any]:
    figures = figures_of(device.spells, device.holds, window, device.first_seen)
    return {
        "id": device.id,
        "node": device.node,
        "resource": device.resource,
        "device_id": device.device_id,
        **figures.as_dict(),
    }


# Figures a ranking sorts by, each read from a row; without a '-' the smallest comes first.
DEVICE_SORTS = (
    "failures",
    "unhealthy_seconds",
    "unhealthy_share",
    "removals",
    "mtbf_seconds",
    "pods_hit",
    "pods_held",
)
GROUP_SORTS = ("devices", "failures", "unhealthy_seconds", "removals", "pods_hit")
DEFAULT_SORT = "-failures"
# A device without a failure has no MTBF: it sorts as the longest.
_NO_MTBF = float(MAX_KEY)


def _sort_value(row: dict[str, Any], figure: str) -> float:
    value = row[figure]
    return _NO_MTBF if value is None else float(value)


def _check_sort(sort: str, figures: tuple[str, ...]) -> tuple[str, bool]:
    descending = sort.startswith("-")
    figure = sort.removeprefix("-")
    if figure not in figures:
        choices = ", ".join(figures)
        raise InvalidInput(
            "sort is not a figure",
            [Problem("sort", "enum", f"must be one of {choices}, each with '-' for descending")],
        )
    return figure, descending


def _page(
    rows: list[dict[str, Any]],
    sort: str,
    figure: str,
    descending: bool,
    tiebreak: str,
    cursor: str | None,
    limit: int,
) -> Page[dict[str, Any]]:
    """One page of rows in the sort's order, ties in `tiebreak` order, the rows after the
    cursor's key (the figure's value and the tiebreak of the page's last row)."""
    check_limit(limit)
    sign = -1.0 if descending else 1.0

    def key(row: dict[str, Any]) -> tuple[float, Any]:
        return (sign * _sort_value(row, figure), row[tiebreak])

    rows.sort(key=key)
    if cursor:
        value, last = _cursor_key(cursor, sort, int if tiebreak == "id" else str)
        after: tuple[float, Any] = (sign * value, last)
        rows = [r for r in rows if key(r) > after]
    if len(rows) <= limit:
        return Page(items=rows, next_cursor=None, count=None)
    page = rows[:limit]
    last_row = page[-1]
    values = [_sort_value(last_row, figure), last_row[tiebreak]]
    return Page(items=page, next_cursor=encode_cursor(sort, values), count=None)


def _seconds(session: Session, start: Any, end: Any) -> ColumnElement[float]:
    """end - start in seconds, as the database computes it."""
    if session.get_bind().dialect.name == "postgresql":
        return cast(extract("epoch", end - start), Float)
    return cast((func.julianday(end) - func.julianday(start)) * 86400.0, Float)


def _later(a: Any, b: Any) -> ColumnElement[datetime]:
    return case((a > b, a), else_=b)


SPELL_SUMS = ("failures", "removals", "unhealthy_seconds")
HOLD_FIGURES = ("pods_hit", "pods_held")


def _pod_name(hold: type[Allocation]) -> ColumnElement[str]:
    # The same "namespace/pod" the figures name a pod by, so both count the same pods.
    return hold.namespace + "/" + hold.pod


def _spell_end(window: Window) -> ColumnElement[datetime]:
    i = DeviceIncident
    until = literal(window.until, UtcDateTime())
    return case((or_(i.ended.is_(None), i.ended > until), until), else_=i.ended)


def _hits(window: Window) -> list[ColumnElement[bool]]:
    """A hold of the joined device reaches into one of its spells of Unhealthy, both cut to the
    window (the spells already reach into it)."""
    i, a = DeviceIncident, Allocation
    since = literal(window.since, UtcDateTime())
    return [
        i.kind == UNHEALTHY_SPELL,
        a.started < _spell_end(window),
        or_(a.ended.is_(None), a.ended > _later(i.started, since)),
    ]


def _pod_counts(pairs: Any, name: str) -> Any:
    """Distinct pods per `id` (a device, or a group's name) of (id, namespace, pod) rows: made
    distinct first, then counted, which the database hashes instead of sorting every pair."""
    distinct_pairs = pairs.distinct().subquery()
    return (
        select(distinct_pairs.c.id, func.count().label(name))
        .group_by(distinct_pairs.c.id)
        .subquery()
    )


def _hold_figures(per_device: Any, filters: ReliabilityFilters, window: Window) -> Any:
    """Pods hit and pods held of each device of `per_device`, counted by the database as
    `figures_of` counts them, so the ranking sorts and pages by them with no hold read here."""
    i, a = DeviceIncident, Allocation
    hit = _pod_counts(
        select(i.device_pk.label("id"), a.namespace, a.pod)
        .join(a, a.device_pk == i.device_pk)
        .where(*_overlapping(i, window), *_spell_conditions(filters, window), *_hits(window)),
        "pods_hit",
    )
    held = _pod_counts(
        select(a.device_pk.label("id"), a.namespace, a.pod).where(
            a.device_pk.in_(select(per_device.c.id)), *_overlapping(a, window)
        ),
        "pods_held",
    )
    return (
        select(
            per_device.c.id,
            func.coalesce(hit.c.pods_hit, 0).label("pods_hit"),
            func.coalesce(held.c.pods_held, 0).label("pods_held"),
        )
        .outerjoin(hit, hit.c.id == per_device.c.id)
        .outerjoin(held, held.c.id == per_device.c.id)
        .subquery()
    )


class _Figures:
    """The figures every device with a spell in the window has, computed by the database,
    one row per device: what the ranking sorts and pages by. `pods_hit` and `pods_held`
    (`hold_rows`) join the spells to the holds, and are computed only when a query asks."""

    def __init__(self, session: Session, filters: ReliabilityFilters, window: Window) -> None:
        self.filters = filters
        i = DeviceIncident
        since = literal(window.since, UtcDateTime())
        until = literal(window.until, UtcDateTime())
        ended = _spell_end(window)
        unhealthy = i.kind == UNHEALTHY_SPELL
        inside = i.started >= since
        per_device = (
            select(
                i.device_pk.label("id"),
                i.node,
                i.resource,
                func.sum(case((and_(unhealthy, inside), 1), else_=0)).label("failures"),
                func.sum(case((and_(i.kind == REMOVED_SPELL, inside), 1), else_=0)).label(
                    "removals"
                ),
                cast(
                    func.sum(
                        case(
                            (unhealthy, _seconds(session, _later(i.started, since), ended)),
                            else_=0.0,
                        )
                    ),
                    Float,
                ).label("unhealthy_seconds"),
            )
            .where(*_overlapping(i, window), *_spell_conditions(filters, window))
            # A device's node and resource never change: one group per device.
            .group_by(i.device_pk, i.node, i.resource)
            .subquery()
        )
        # The spells' own sums: enough to order and group by, with no device read.
        self.spell_rows = per_device
        observed = _seconds(session, _later(Device.first_seen, since), until)
        unhealthy_seconds = per_device.c.unhealthy_seconds
        # Share and MTBF need the time each device was known: its first sighting.
        self.rows = (
            select(
                per_device.c.id,
                case((observed > 0, unhealthy_seconds / observed), else_=0.0).label(
                    "unhealthy_share"
                ),
                case(
                    (
                        per_device.c.failures > 0,
                        (observed - unhealthy_seconds) / per_device.c.failures,
                    ),
                    else_=_NO_MTBF,
                ).label("mtbf_seconds"),
            )
            .join(Device, Device.id == per_device.c.id)
            .subquery()
        )
        self.hold_rows = _hold_figures(per_device, filters, window)

    def page(
        self,
        session: Session,
        figure: str,
        descending: bool,
        sort: str,
        cursor: str | None,
        limit: int,
    ) -> tuple[list[int], str | None, int]:
        """The ids of one page of devices in the sort's order, the next page's cursor, and
        how many devices follow the cursor (all of them on the first page)."""
        check_limit(limit)
        ranked = (
            self.spell_rows
            if figure in SPELL_SUMS
            else self.hold_rows
            if figure in HOLD_FIGURES
            else self.rows
        )
        value = cast(ranked.c[figure], Float)
        rank = -value if descending else value
        query = select(ranked.c.id, value.label("value"), rank.label("rank")).subquery()
        # Counted in the same pass as the sort: a second aggregation would cost as much again.
        page = select(query.c.id, query.c.value, func.count().over().label("total"))
        if cursor:
            last_value, last_id = _cursor_key(cursor, sort, int)
            start = -last_value if descending else last_value
            page = page.where(
                tuple_(query.c.rank, query.c.id)
                > tuple_(literal(start, Float), literal(last_id, BigInteger))
            )
        rows = session.execute(page.order_by(query.c.rank, query.c.id).limit(limit + 1)).all()
        total = rows[0].total if rows else 0
        if len(rows) <= limit:
            return [row.id for row in rows], None, total
        last = rows[limit - 1]
        next_cursor = encode_cursor(sort, [float(last.value), last.id])
        return [row.id for row in rows[:limit]], next_cursor, total

    def groups(
        self, session: Session, by: str, window: Window, *, pods_hit: bool = True
    ) -> list[dict[str, Any]]:
        """Per node or resource; `pods_hit` left 0 unless asked for (see `add_pods_hit`)."""
        key = self.spell_rows.c[by]
        totals = session.execute(
            select(
                key.label("name"),
                func.count().label("devices"),
                func.sum(self.spell_rows.c.failures).label("failures"),
                func.sum(self.spell_rows.c.removals).label("removals"),
                func.sum(self.spell_rows.c.unhealthy_seconds).label("unhealthy_seconds"),
            ).group_by(key)
        ).all()
        hit = self._pods_hit(session, by, window) if pods_hit else {}
        return [
            {
                by: row.name,
                "devices": row.devices,
                "failures": int(row.failures),
                "unhealthy_seconds": round(float(row.unhealthy_seconds), 3),
                "removals": int(row.removals),
                "pods_hit": hit.get(row.name, 0),
            }
            for row in totals
        ]

    def add_pods_hit(
        self, session: Session, by: str, window: Window, groups: list[dict[str, Any]]
    ) -> None:
        """Fill in `pods_hit` of these groups (a page of them) only."""
        hit = self._pods_hit(session, by, window, [group[by] for group in groups])
        for group in groups:
            group["pods_hit"] = hit.get(group[by], 0)

    def _pods_hit(
        self, session: Session, by: str, window: Window, only: list[str] | None = None
    ) -> dict[str, int]:
        """Distinct pods per group that held one of its devices while it was Unhealthy."""
        i, a = DeviceIncident, Allocation
        key = i.node if by == "node" else i.resource
        counts = _pod_counts(
            select(key.label("id"), a.namespace, a.pod)
            .join(a, a.device_pk == i.device_pk)
            .where(
                *_overlapping(i, window),
                *_spell_conditions(self.filters, window),
                *_hits(window),
                *([] if only is None else [key.in_(only)]),
            ),
            "pods_hit",
        )
        rows = session.execute(select(counts.c.id, counts.c.pods_hit))
        return {row[0]: int(row[1]) for row in rows}


def _cursor_key(cursor: str, sort: str, tie_type: type) -> tuple[float, Any]:
    value, last = decode_cursor(cursor, sort, 2)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad_cursor("holds a key this API did not write")
    if type(last) is not tie_type:
        raise bad_cursor("holds a key this API did not write")
    if isinstance(last, int) and not -MAX_KEY <= last <= MAX_KEY:
        raise bad_cursor("holds a key this API did not write")
    return float(value), last


class Ranking:
    """The devices with a spell of Unhealthy or of removal in the window, ranked by any
    figure: the devices themselves, or summed per node or per resource. A device without a
    spell has no figure worth ranking and is not among them.

    The database computes every figure it ranks by (pods hit and held from the failing
    devices' holds, the namespace filter as a semi-join on them), sorts and pages; only a
    page's devices are then read with their spells and holds, and `figures_of` gives their
    figures and the names of the pods hit."""

    def __init__(self, session: Session, filters: ReliabilityFilters, window: Window) -> None:
        self.session = session
        self.filters = filters
        self.window = window
        self._figures: _Figures | None = None

    def _in_database(self) -> _Figures:
        if self._figures is None:
            self._figures = _Figures(self.session, self.filters, self.window)
        return self._figures

    def devices(
        self, *, sort: str = DEFAULT_SORT, cursor: str | None = None, limit: int = 50
    ) -> Page[dict[str, Any]]:
        """Worst first by default: most failures."""
        figure, descending = _check_sort(sort, DEVICE_SORTS)
        figures = self._in_database()
        ids, next_cursor, total = figures.page(
            self.session, figure, descending, sort, cursor, limit
        )
        found = _troubled_devices(self.session, self.window, ids)
        items = [_device_row(found[pk], self.window) for pk in ids if pk in found]
        # Past the first page, the count is of the devices from the cursor on.
        count = total if cursor is None else None
        return Page(items=items, next_cursor=next_cursor, count=count)

    def groups(
        self, by: str, *, sort: str = DEFAULT_SORT, cursor: str | None = None, limit: int = 50
    ) -> Page[dict[str, Any]]:
        """Per node or per resource (`by`): `devices` is how many of its devices had a spell
        in the window, the figures their sums; `pods_hit` counts each pod once per group."""
        figure, descending = _check_sort(sort, GROUP_SORTS)
        # Pods hit join spells to holds: for the page's groups only, unless sorted by it.
        later = figure != "pods_hit"
        rows = self._group_rows(by, pods_hit=not later)
        page = _page(rows, sort, figure, descending, by, cursor, limit)
        if later:
            self._in_database().add_pods_hit(self.session, by, self.window, page.items)
        page.count = len(rows)
        return page

    def _group_rows(self, by: str, *, pods_hit: bool = True) -> list[dict[str, Any]]:
        return self._in_database().groups(self.session, by, self.window, pods_hit=pods_hit)

    def by_label(
        self, label: str, *, sort: str = DEFAULT_SORT, cursor: str | None = None, limit: int = 50
    ) -> Page[dict[str, Any]]:
        """Per value of a node label, such as the GPU model a feature-discovery tool publishes
        (`nvidia.com/gpu.product`): the nodes' figures summed. `value` is "" for nodes without
        the label. A pod runs on one node, so the nodes' pods hit add up without repeats."""
        figure, descending = _check_sort(sort, GROUP_SORTS)
        check_label(label)
        per_node = self._group_rows("node")
        labels = _node_labels(self.session, [row["node"] for row in per_node])
        groups: dict[str, dict[str, Any]] = {}
        for row in per_node:
            value = str((labels.get(row["node"]) or {}).get(label) or "")
            group = groups.setdefault(
                value,
                {"label": label, "value": value, "nodes": 0} | {name: 0 for name in GROUP_SORTS},
            )
            group["nodes"] += 1
            for name in GROUP_SORTS:
                group[name] += row[name]
            group["unhealthy_seconds"] = round(group["unhealthy_seconds"], 3)
        rows = list(groups.values())
        page = _page(rows, sort, figure, descending, "value", cursor, limit)
        page.count = len(rows)
        return page


# A label key: an optional DNS prefix (253) and '/', then a name (63).
LABEL_MAX = 317


def check_label(label: str) -> None:
    if not label or len(label) > LABEL_MAX or any(ord(ch) < 33 for ch in label):
        raise InvalidInput(
            "label is not a node label key",
            [
                Problem(
                    "label",
                    "label_key",
                    f"must be a label key such as nvidia.com/gpu.product, "
                    f"1 to {LABEL_MAX} characters without spaces",
                )
            ],
        )


def _node_labels(session: Session, names: list[str]) -> dict[str, dict[str, Any] | None]:
    found: dict[str, dict[str, Any] | None] = {}
    for start in range(0, len(names), CHUNK):
        rows = session.execute(
            select(Node.name, Node.labels).where(Node.name.in_(names[start : start + CHUNK]))
        )
        found.update({row.name: row.labels for row in rows})
    return found


def device_figures(session: Session, device_pk: int, window: Window) -> dict[str, Any]:
    """One device's figures, zero when it had no spell in the window."""
    found = session.execute(
        select(
            Device.id, Device.node_name, Device.resource, Device.device_id, Device.first_seen
        ).where(Device.id == device_pk)
    ).one_or_none()
    if found is None:
        raise NotFound(f"no device {device_pk}")
    found_spells = _troubled_devices(session, window, [device_pk])
    device = found_spells.get(device_pk)
    if device is None:
        device = _Device(
            found.id, found.node_name, found.resource, found.device_id, found.first_seen
        )
        _add_holds(session, {device_pk: device}, window)
    return {"window": window.as_dict(), **_device_row(device, window)}


def recent_failures(
    session: Session, now: datetime, *, node: str | None = None, device_pk: int | None = None
) -> dict[int, int]:
    """How often each device's health turned Unhealthy in the last 24 hours, by device id,
    for the devices of a node or one device; devices without a failure are left out."""
    query = (
        select(DeviceIncident.device_pk, DeviceIncident.started)
        .join(Device, Device.id == DeviceIncident.device_pk)
        .where(
            DeviceIncident.kind == UNHEALTHY_SPELL,
            DeviceIncident.started >= now - FLAP_WINDOW,
            DeviceIncident.started < now,
        )
    )
    if node is not None:
        query = query.where(Device.node_name == node)
    if device_pk is not None:
        query = query.where(Device.id == device_pk)
    counts: dict[int, int] = defaultdict(int)
    for row in session.execute(query):
        counts[row.device_pk] += 1
    return dict(counts)


def flaps(failures: int) -> bool:
    return failures >= FLAP_FAILURES
