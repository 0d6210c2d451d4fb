"""The fleet gauges of /metrics, written straight into the exposition text.

A fleet of 5,000 nodes has tens of thousands of per-node series. The Prometheus client builds
an object per sample and then formats it, several times slower than formatting the lines
directly, so these families are written here; both exposition formats share the gauge syntax.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from devicedeck.inventory.fields import HEALTH_VALUES
from devicedeck.inventory.read.freshness import Freshness
from devicedeck.inventory.read.gauges import (
    FIELD,
    RECORD,
    DeviceRow,
    NodeRow,
    device_rows,
    node_rows,
)

log = logging.getLogger(__name__)


def label_value(value: str) -> str:
    """A label value as the exposition formats quote it."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def _header(name: str, help_text: str) -> str:
    return f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"


class FleetGauges:
    """The fleet's families, read from the database: the per-node families and the fleet's
    totals from one statement over nodes and their per-resource counters, and with per-device
    series on, those from one over the present devices.

    With `refresh` seconds above zero, a scrape answers with the per-node text of the last
    read, which `read_nodes` (the service's background task) renews every `refresh` seconds
    while scrapes come: at 5,000 nodes that read is most of a scrape's time, and a scraper then
    waits for none of it. A scrape reads for itself when there is no such text, or when it is
    older than `REREAD_AFTER` refresh intervals (the background reads failing, say, while the
    database is away); with `refresh` at zero, every scrape reads. Per-device series, when on,
    are read at each scrape: they cost a second or more at that size, too much to pay every
    few seconds for scrapes that come every minute or less often."""

    # Renewals stop when no scrape came for this long, and start again with the next scrape.
    IDLE_AFTER = 600.0
    REREAD_AFTER = 3

    def __init__(
        self,
        factory: sessionmaker[Session],
        clock: Callable[[], Freshness],
        *,
        per_device: bool,
        refresh: float = 0.0,
    ) -> None:
        self.factory = factory
        self.clock = clock
        self.per_device = per_device
        self.refresh = refresh
        # (time.monotonic() when read, text), of the last read.
        self._latest: tuple[float, bytes] | None = None
        self._last_scrape: float | None = None
        # What the last scrape wrote per node, and the fleet totals of those nodes: a scrape
        # writes again only what changed. One scrape at a time updates them.
        self._kept: dict[str, _Kept] = {}
        self._totals: dict[str, list[int]] = {}
        self._lock = threading.Lock()

    def render(self) -> bytes:
        """The fleet's families for a scrape."""
        now = time.monotonic()
        self._last_scrape = now
        latest = self._latest
        if (
            self.refresh <= 0
            or latest is None
            or now - latest[0] > self.REREAD_AFTER * self.refresh
        ):
            nodes = self.read_nodes()
        else:
            nodes = latest[1]
        if not self.per_device:
            return nodes
        with self.factory() as session:
            devices = device_rows(session, self.clock().cutoff)
        lines = [_header("devicedeck_device_healthy", DEVICE_HELP), *self._device_lines(devices)]
        return nodes + "".join(lines).encode()

    def wanted(self) -> bool:
        """Whether a renewal is worth its read: a scrape came lately."""
        last = self._last_scrape
        return last is not None and time.monotonic() - last < self.IDLE_AFTER

    def read_nodes(self) -> bytes:
        """The per-node families and the fleet's totals as the database has them now, kept
        for the scrapes to come."""
        started = time.monotonic()
        clock = self.clock()
        with self.factory() as session:
            nodes = node_rows(session)
        with self._lock:
            text = "".join(self._node_lines(nodes, clock)).encode()
            # A scrape's read and a renewal may end in either order: the later read is kept.
            if self._latest is None or self._latest[0] <= started:
                self._latest = (started, text)
        return text

    @staticmethod
    def _device_lines(devices: list[DeviceRow]) -> list[str]:
        return [
            f'devicedeck_device_healthy{{node="{label_value(node)}",'
            f'resource="{label_value(resource)}",device="{label_value(device)}",'
            f'namespace="{namespace}",pod="{label_value(pod)}"}} {1 if healthy else 0}\n'
            for node, resource, device, healthy, namespace, pod in devices
        ]

    def _node_lines(self, rows: list[NodeRow], clock: Freshness) -> list[str]:
        cutoff = clock.cutoff.timestamp()
        health: list[str] = [_header("devicedeck_node_devices", NODE_DEVICES_HELP)]
        allocated: list[str] = [_header("devicedeck_node_devices_allocated", ALLOCATED_HELP)]
        seen: list[str] = [_header("devicedeck_node_last_seen_timestamp_seconds", SEEN_HELP)]
        stale: list[str] = [_header("devicedeck_node_stale", STALE_HELP)]
        # A node's counters seldom change between scrapes: its lines, and its share of the
        # totals, are kept from the last scrape and replaced only when they change.
        previous, kept = self._kept, {}
        totals = {resource: list(counts) for resource, counts in self._totals.items()}
        for node, last_seen, counters in rows:
            key = (counters, last_seen < cutoff)
            entry = previous.get(node)
            if entry is None or entry.key != key:
                lines = _NodeLines.of(node, *key)
                if entry is not None:
                    _add(totals, entry.lines.counts, -1)
                _add(totals, lines.counts, 1)
                entry = _Kept(key, lines, last_seen, _seen_line(lines.name, last_seen))
            elif entry.last_seen != last_seen:
                entry.last_seen, entry.seen = last_seen, _seen_line(entry.lines.name, last_seen)
            kept[node] = entry
            health.append(entry.lines.health)
            allocated.append(entry.lines.allocated)
            seen.append(entry.seen)
            stale.append(entry.lines.stale)
        for node in previous.keys() - kept.keys():  # nodes deleted since the last scrape
            _add(totals, previous[node].lines.counts, -1)
        self._kept, self._totals = kept, totals
        fleet = [_header("devicedeck_devices", DEVICES_HELP)]
        fleet.extend(
            f'devicedeck_devices{{resource="{label_value(resource)}",health="{health_value}"}} '
            f"{count}\n"
            for resource, counts in sorted(totals.items())
            for health_value, count in zip(HEALTH_VALUES, counts, strict=True)
            if count
        )
        return fleet + health + allocated + seen + stale


def _seen_line(name: str, last_seen: float) -> str:
    return f'devicedeck_node_last_seen_timestamp_seconds{{node="{name}"}} {last_seen!r}\n'


def _add(
    totals: dict[str, list[int]], counts: tuple[tuple[str, int, int, int], ...], sign: int
) -> None:
    for resource, healthy, unhealthy, unknown in counts:
        total = totals.setdefault(resource, [0, 0, 0])
        total[0] += sign * healthy
        total[1] += sign * unhealthy
        total[2] += sign * unknown


@dataclass
class _Kept:
    """What the last scrape wrote for one node: its lines for its counters and staleness
    (`key`), and its last-seen line."""

    key: tuple[str | None, bool]
    lines: _NodeLines
    last_seen: float
    seen: str


@dataclass(frozen=True)
class _NodeLines:
    """One node's lines of the per-node families but its last-seen time, which changes at
    every snapshot, and its counts by health per resource, for the fleet's totals."""

    name: str
    health: str
    allocated: str
    stale: str
    counts: tuple[tuple[str, int, int, int], ...]

    @staticmethod
    def of(node: str, counters: str | None, is_stale: bool) -> _NodeLines:
        name = label_value(node)
        health, allocated, counts = [], [], []
        for entry in sorted(counters.split(RECORD)) if counters else []:
            resource, *values = entry.split(FIELD)
            healthy, unhealthy, unknown, devices, held = map(int, values)
            if is_stale:
                healthy, unhealthy, unknown = 0, 0, devices
            labels = f'node="{name}",resource="{label_value(resource)}"'
            health.append(
                f'devicedeck_node_devices{{{labels},health="Healthy"}} {healthy}\n'
                f'devicedeck_node_devices{{{labels},health="Unhealthy"}} {unhealthy}\n'
                f'devicedeck_node_devices{{{labels},health="Unknown"}} {unknown}\n'
            )
            allocated.append(f"devicedeck_node_devices_allocated{{{labels}}} {held}\n")
            counts.append((resource, healthy, unhealthy, unknown))
        return _NodeLines(
            name,
            "".join(health),
            "".join(allocated),
            f'devicedeck_node_stale{{node="{name}"}} {1 if is_stale else 0}\n',
            tuple(counts),
        )


DEVICES_HELP = "Present devices by resource and health (Unknown for stale nodes)."
NODE_DEVICES_HELP = (
    "Present devices per node and resource by health (Unknown for every device of a stale node)."
)
ALLOCATED_HELP = "Present devices per node and resource that a pod holds now."
SEEN_HELP = "Unix time of the node's last accepted snapshot."
STALE_HELP = "1 while the node is stale (no snapshot for DEVICEDECK_STALE_AFTER seconds), else 0."
DEVICE_HELP = (
    "1 when the device is Healthy, else 0, per present device of a node that is not stale; "
    "namespace and pod name its holder, empty when free."
)


async def renew_fleet_gauges(fleet: FleetGauges) -> None:
    """Every `fleet.refresh` seconds while scrapes come, the read their answers are made of."""
    while True:
        await asyncio.sleep(fleet.refresh)
        if not fleet.wanted():
            continue
        try:
            await asyncio.to_thread(fleet.read_nodes)
        except Exception:
            # Scrapes read for themselves once the text is too old, and answer as they did.
            log.warning(
                "reading the fleet gauges failed; will retry",
                exc_info=True,
                extra={"event": "fleet_gauges_failed"},
            )
