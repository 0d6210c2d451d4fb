"""Derived health weighed against the Node's status: unhealthy, or removed.

A resource whose plugin stream is not tapped gets its device list from the node agent with
health derived from the kubelet: a device the kubelet offers (allocatable) is Healthy, any
other it knows of is Unhealthy. The kubelet's lists hold healthy devices only, so on the node a
failed device and an unplugged one look the same. The Node's status tells them apart by count:
capacity counts healthy + unhealthy devices, allocatable the healthy ones, so capacity -
allocatable devices are unhealthy, and the other devices not offered are gone.

The rule, for one node and resource:

- Evidence is the Node's status only when it describes the same moment as the device list:
  its allocatable must equal the number of devices the list offers. The kubelet updates its
  lists at once and the Node's status some seconds later; in between nothing is judged.
- With evidence, when more devices are not offered than capacity - allocatable, the excess is
  removed, choosing the most recent departures from allocatable first (the device that left
  when capacity fell is the one unplugged); ties go by device ID, last first. The others stay
  present and Unhealthy. When capacity rises, or a removed device is offered again, it comes
  back.
- Without evidence (no Node status, cluster access off, the resource not in it, or the counts
  not agreeing) a device not offered stays present and Unhealthy, and says why it may not be
  (`health_detail`).

The counts cannot say which device went: an unhealthy device unplugged while a newer one is
unhealthy marks the newer one removed. The rule is applied by a derived snapshot's full path
and by the cluster watcher when a Node's status changes (inventory/write/other_writers.py), from
the same inputs, so either order gives the same rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from devicedeck.inventory.cluster.extended_resources import quantity
from devicedeck.inventory.fields import HEALTHY

DERIVED = "derived"
# What `health_detail` says of a derived Unhealthy device.
NOT_OFFERED_NO_STATUS = (
    "Not offered by the kubelet: may be unhealthy or removed (no Node status to tell them apart)"
)
NOT_OFFERED_COUNTED = (
    "Not offered by the kubelet; the Node's status counts {unhealthy} of its {capacity} "
    "devices unhealthy"
)
REMOVED_BY_CAPACITY_DETAIL = (
    "Removed: not offered by the kubelet, and no longer counted in the Node's capacity"
)


@dataclass(frozen=True)
class StatusCounts:
    """A resource's devices as the Node's status counts them."""

    capacity: int
    allocatable: int

    @property
    def unhealthy(self) -> int:
        return max(self.capacity - self.allocatable, 0)


def status_counts(
    capacity: Mapping[str, Any] | None, allocatable: Mapping[str, Any] | None, resource: str
) -> StatusCounts | None:
    """The resource's counts in a Node's status, or None when the status does not give both."""
    if not capacity or not allocatable or resource not in capacity or resource not in allocatable:
        return None
    cap, alloc = quantity(capacity[resource]), quantity(allocatable[resource])
    if cap is None or alloc is None:
        return None
    return StatusCounts(cap, alloc)


@dataclass(frozen=True)
class NotOffered:
    device_id: str
    # When it left allocatable: its health's last change to Unhealthy.
    departed: datetime


def withheld(
    counts: StatusCounts | None, offered: int, not_offered: Iterable[NotOffered]
) -> set[str]:
    """The device IDs among `not_offered` that the Node's status counts as gone."""
    if counts is None or counts.allocatable != offered:
        return set()
    candidates = sorted(not_offered, key=lambda d: (d.departed, d.device_id), reverse=True)
    excess = len(candidates) - counts.unhealthy
    return {d.device_id for d in candidates[:excess]} if excess > 0 else set()


def health_detail(
    health_source: str,
    reported_health: str,
    capacity: Mapping[str, Any] | None,
    allocatable: Mapping[str, Any] | None,
    resource: str,
) -> str | None:
    """Why a derived device reads Unhealthy, for the API and the dashboard; None otherwise."""
    if health_source != DERIVED or reported_health == HEALTHY:
        return None
    counts = status_counts(capacity, allocatable, resource)
    if counts is None:
        return NOT_OFFERED_NO_STATUS
    return NOT_OFFERED_COUNTED.format(unhealthy=counts.unhealthy, capacity=counts.capacity)
