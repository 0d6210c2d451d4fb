"""The fleet gauges of /metrics, written straight into the exposition text.

A fleet of 5,000 nodes has tens of thousands of per-node series. The Prometheus client builds
an object per sample and then formats it, several times slower than formatting the lines
directly, so these families are written here; both exposition formats share the gauge syntax.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from app.inventory.fields import HEALTH_VALUES
from app.inventory.freshness import Freshness
from app.inventory.gauges import FIELD, RECORD, DeviceRow, NodeRow, device_rows, node_rows


def label_value(value: str) -> str:
    """A label value as the exposition formats quote it."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def _header(name: str, help_text: str) -> str:
    return f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"


class FleetGauges:
    """Reads the database at each scrape: one statement over nodes and their per-resource
    counters, and with per-device series on, one over the present devices."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        clock: Callable[[], Freshness],
        *,
        per_device: bool,
    ) -> None:
        self.factory = factory
        self.clock = clock
        self.per_device = per_device
        self._nodes: dict[tuple[str, str | None, bool], _NodeLines] = {}

    def render(self) -> str:
        clock = self.clock()
        with self.factory() as session:
            nodes = node_rows(session)
            devices = device_rows(session, clock.cutoff) if self.per_device else None
        lines = self._node_lines(nodes, clock)
        if devices is not None:
            lines.append(_header("devicedeck_device_healthy", DEVICE_HELP))
            lines.extend(self._device_lines(devices))
        return "".join(lines)

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
        totals: dict[str, list[int]] = {}
        health: list[str] = [_header("devicedeck_node_devices", NODE_DEVICES_HELP)]
        allocated: list[str] = [_header("devicedeck_node_devices_allocated", ALLOCATED_HELP)]
        seen: list[str] = [_header("devicedeck_node_last_seen_timestamp_seconds", SEEN_HELP)]
        stale: list[str] = [_header("devicedeck_node_stale", STALE_HELP)]
        # A node's counters seldom change between scrapes: its lines are kept from the last
        # scrape, keyed by everything they show, and only the changed ones are written again.
        previous_nodes, nodes = self._nodes, {}
        for node, last_seen, counters in rows:
            key = (node, counters, last_seen < cutoff)
            lines = previous_nodes.get(key)
            if lines is None:
                lines = _NodeLines.of(*key)
            nodes[key] = lines
            health.append(lines.health)
            allocated.append(lines.allocated)
            seen.append(
                f'devicedeck_node_last_seen_timestamp_seconds{{node="{lines.name}"}} '
                f"{last_seen!r}\n"
            )
            stale.append(lines.stale)
            for resource, *counts in lines.counts:
                total = totals.get(resource)
                if total is None:
                    totals[resource] = counts
                else:
                    total[0] += counts[0]
                    total[1] += counts[1]
                    total[2] += counts[2]
        self._nodes = nodes
        fleet = [_header("devicedeck_devices", DEVICES_HELP)]
        fleet.extend(
            f'devicedeck_devices{{resource="{label_value(resource)}",health="{health_value}"}} '
            f"{count}\n"
            for resource, counts in sorted(totals.items())
            for health_value, count in zip(HEALTH_VALUES, counts, strict=True)
            if count
        )
        return fleet + health + allocated + seen + stale


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
