"""Derived health weighed against the Node's status: which devices are unhealthy, which went,
and which cannot be told.

A resource whose plugin stream is not tapped gets its device list from the node agent with
health derived from the kubelet: a device the kubelet offers (allocatable) is Healthy. The
kubelet's lists hold healthy devices only, so on the node a failed device and an unplugged
one look the same: both are simply not offered. The Node's status counts them: capacity -
allocatable devices are unhealthy, and the rest of the devices not offered are gone. The
counts say how many, never which.

The rule (`judge`), for one node and resource, at each observation (a derived snapshot or a
Node status, whichever changed, with the other as last stored):

- The Node's status is evidence only when it describes the same moment as the device list:
  its allocatable equals the number of devices offered. The kubelet updates its lists at once
  and the Node's status some seconds later; in between nothing is concluded, and a device that
  stopped being offered meanwhile reads "unhealthy or removed".
- A judged observation is compared with the last judged one (the `Basis`). When the change
  in capacity is explained by the devices whose offer changed, the others are taken as they
  were: one device stopping being offered while capacity stays is unhealthy; one stopping
  while capacity falls by one is removed; several stopping while capacity falls by fewer
  cannot be told apart, and each is uncertain. When the devices that changed do not explain
  the change (capacity fell more), the devices not offered before may have gone too, and are
  uncertain unless the counts settle them.
- Then the counts settle what they can: when the devices known unhealthy already make up
  capacity - allocatable, every uncertain device is removed; when the uncertain devices are
  all the unhealthy ones left, they are unhealthy. Devices told unhealthy beyond what the
  counts allow are dropped to uncertain first.

Comparing with the last judged observation assumes the service saw the devices change one at
a time. After a gap in what it saw (the first snapshot of an agent's new boot, which knew
nothing of what happened while it was away; the first this process takes after it started,
which may stand for several changes the agent held while the service was down; or a Node
status that catches up after the API server or the watcher was away, kept as `Basis.gap`),
several changes may lie between the two: a device told unhealthy may have gone while another
failed, which the counts alone cannot tell from that other device going. So after a gap every
device not offered, but those already removed, is uncertain until the counts settle it.

A removed device comes back when it is offered again, or when capacity rises by more than the
devices offered again can add: a bad device reseated registers unhealthy and is never offered.
The removed devices known then are uncertain, and the counts settle them.

A device offered is present and Healthy, whatever was concluded of it before: a device that
only flapped is never removed. A device the agent no longer lists (it restarted and forgot
the devices it saw) counts as not offered, not as gone.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from devicedeck.inventory.cluster.extended_resources import quantity
from devicedeck.inventory.fields import HEALTHY

DERIVED = "derived"

# What the rule concludes of a device the kubelet does not offer.
UNHEALTHY_PRESENT = "unhealthy"
GONE = "removed"
UNCERTAIN = "uncertain"
PRESENCES = (UNHEALTHY_PRESENT, GONE, UNCERTAIN)

# What `health_detail` says of a derived Unhealthy device.
NOT_OFFERED_NO_STATUS = (
    "Not offered by the kubelet: may be unhealthy or removed (no Node status to tell them apart)"
)
NOT_OFFERED_COUNTED = (
    "Not offered by the kubelet; the Node's status counts {unhealthy} of its {capacity} "
    "devices unhealthy"
)
NOT_OFFERED_UNCERTAIN = (
    "Unhealthy or removed: not offered by the kubelet, and the Node's status ({unhealthy} "
    "unhealthy of {capacity}) does not say which of the devices not offered went"
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
class Basis:
    """The last judged observation of a resource: the Node's capacity then, the devices
    offered, and what was concluded of each known device not offered."""

    capacity: int
    offered: frozenset[str]
    presence: Mapping[str, str] = field(default_factory=dict)
    # The Node's status was out of sight since (the API server or the watcher away): the
    # next judged observation may stand for several changes.
    gap: bool = False

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "capacity": self.capacity,
            "offered": sorted(self.offered),
            "presence": dict(sorted(self.presence.items())),
        }
        if self.gap:
            data["gap"] = True
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Basis | None:
        if not data:
            return None
        return cls(
            int(data["capacity"]),
            frozenset(data["offered"]),
            dict(data.get("presence") or {}),
            bool(data.get("gap")),
        )


@dataclass(frozen=True)
class Judgement:
    # Each known device not offered: UNHEALTHY_PRESENT, GONE or UNCERTAIN.
    presence: dict[str, str]
    # What the next observation is compared with: the new one when this one was judged.
    basis: Basis | None
    # The counts when they were evidence.
    counts: StatusCounts | None

    def uncertain(self) -> list[str]:
        return sorted(d for d, p in self.presence.items() if p == UNCERTAIN)

    def summary(self) -> dict[str, Any] | None:
        """What the counts say of the uncertain devices, for the node's event and page; None
        when every device not offered is told."""
        among = self.uncertain()
        if not among or self.counts is None:
            return None
        told_unhealthy = sum(1 for p in self.presence.values() if p == UNHEALTHY_PRESENT)
        unhealthy = max(min(self.counts.unhealthy - told_unhealthy, len(among)), 0)
        return {"unhealthy": unhealthy, "removed": len(among) - unhealthy, "among": among}


def judge(
    basis: Basis | None,
    known: Collection[str],
    offered: Collection[str],
    counts: StatusCounts | None,
    removed: Collection[str] = (),
    *,
    after_gap: bool = False,
) -> Judgement:
    """What the observation (the devices `known`, those of them `offered`, the Node's
    `counts`) says of each device not offered, after the last judged one (`basis`).
    `removed`: the known devices removed now.
    `after_gap`: observations may have been missed since the basis."""
    offered_set = set(offered)
    removed_set = set(removed) - offered_set
    not_offered = sorted(set(known) - offered_set)

    def prior(device_id: str) -> str | None:
        if device_id in removed_set:
            return GONE
        if basis is None:
            return None
        if device_id in basis.offered:
            return _OFFERED
        return basis.presence.get(device_id)

    if counts is None or counts.allocatable != len(offered_set):
        # No evidence now: what was concluded stands for the devices not offered then; any
        # other device not offered may be either.
        kept = {d: p if (p := prior(d)) in PRESENCES else UNCERTAIN for d in not_offered}
        return Judgement(kept, basis, None)
    if basis is None:
        presence = {d: GONE if d in removed_set else UNCERTAIN for d in not_offered}
    else:
        presence = _compared(basis, not_offered, offered_set, counts, prior)
        # The devices offered again that went, or may have: each may add one to capacity.
        may_add = sum(1 for d in offered_set if prior(d) in (GONE, UNCERTAIN, None))
        if after_gap or basis.gap or _several_changes(basis, offered_set, counts, may_add):
            presence.update({d: UNCERTAIN for d in not_offered if prior(d) != GONE})
        # Capacity rose by more than the devices offered again can add: a removed device may
        # be back already failed (a bad device reseated registers unhealthy, and is never
        # offered), or have been plugged in and failed while nobody looked.
        if counts.capacity - basis.capacity > may_add:
            presence.update({d: UNCERTAIN for d in not_offered if prior(d) == GONE})
    _settle(presence, counts)
    return Judgement(presence, Basis(counts.capacity, frozenset(offered_set), presence), counts)


_OFFERED = "offered"


def _several_changes(basis: Basis, offered: set[str], counts: StatusCounts, may_add: int) -> bool:
    """Whether the observation may hold a removal beside other changes: more than one device's
    offer changed, and capacity moved or a device that went (or may have) is offered again
    (`may_add` of them). Then which device went is not named by the offer: an unhealthy device
    unplugged as another fails and a third recovers looks like the failing one unplugged.
    With capacity still and no device back from a removal, nothing went, and each device that
    left failed."""
    if len(offered ^ basis.offered) <= 1:
        return False
    returned = may_add > 0
    return counts.capacity != basis.capacity or returned


def _compared(
    basis: Basis,
    not_offered: list[str],
    offered: set[str],
    counts: StatusCounts,
    prior: Callable[[str], str | None],
) -> dict[str, str]:
    left = [d for d in not_offered if prior(d) in (_OFFERED, None)]
    stayed = {d: p for d in not_offered if (p := prior(d)) in PRESENCES}
    joined = [prior(d) for d in offered if prior(d) != _OFFERED]
    # What the devices offered again add to capacity: a removed one +1, an unhealthy one 0,
    # an uncertain or new one either.
    certain_returns = joined.count(GONE)
    maybe_returns = sum(1 for p in joined if p in (UNCERTAIN, None))
    change = counts.capacity - basis.capacity
    presence = dict(stayed)
    if certain_returns - len(left) <= change <= certain_returns + maybe_returns:
        # Explained by the devices that changed: how many of those that left went.
        fewest = max(0, certain_returns - change)
        most = min(len(left), certain_returns + maybe_returns - change)
        for d in left:
            if most == 0:
                presence[d] = UNHEALTHY_PRESENT
            elif fewest == len(left):
                presence[d] = GONE
            else:
                presence[d] = UNCERTAIN
    elif change < certain_returns - len(left):
        # More went than left the offer: all that left, and some not offered before.
        for d in left:
            presence[d] = GONE
        for d, p in stayed.items():
            if p == UNHEALTHY_PRESENT:
                presence[d] = UNCERTAIN
    else:
        # More came than the offer shows: devices unhealthy from the start, unknown here.
        for d in left:
            presence[d] = UNHEALTHY_PRESENT
    return presence


def _settle(presence: dict[str, str], counts: StatusCounts) -> None:
    """Let the counts decide what they can, after dropping what they contradict. A removed
    device is decided by `judge` alone: more unhealthy devices than the others explain are
    ones unknown here (unhealthy since before the agent saw them)."""
    unhealthy = counts.unhealthy

    def having(value: str) -> list[str]:
        return [d for d, p in presence.items() if p == value]

    if len(having(UNHEALTHY_PRESENT)) > unhealthy:
        presence.update(dict.fromkeys(having(UNHEALTHY_PRESENT), UNCERTAIN))
    uncertain = having(UNCERTAIN)
    if not uncertain:
        return
    left_unhealthy = unhealthy - len(having(UNHEALTHY_PRESENT))
    if left_unhealthy <= 0:
        presence.update(dict.fromkeys(uncertain, GONE))
    elif left_unhealthy >= len(uncertain):
        presence.update(dict.fromkeys(uncertain, UNHEALTHY_PRESENT))


def health_detail(
    health_source: str,
    reported_health: str,
    capacity: Mapping[str, Any] | None,
    allocatable: Mapping[str, Any] | None,
    resource: str,
    *,
    uncertain: bool = False,
) -> str | None:
    """Why a derived device reads Unhealthy, for the API and the dashboard; None otherwise."""
    if health_source != DERIVED or reported_health == HEALTHY:
        return None
    counts = status_counts(capacity, allocatable, resource)
    if counts is None:
        return NOT_OFFERED_NO_STATUS
    words = NOT_OFFERED_UNCERTAIN if uncertain else NOT_OFFERED_COUNTED
    return words.format(unhealthy=counts.unhealthy, capacity=counts.capacity)


def offered_of(devices: Iterable[tuple[str, str]]) -> set[str]:
    """The devices offered among (device ID, health) pairs."""
    return {d for d, health in devices if health == HEALTHY}
