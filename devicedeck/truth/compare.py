"""The rules for a device whose presence, health or holder the service gives wrongly, and
the settling window that lets the service catch up before a difference counts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from devicedeck.truth.model import (
    UNHEALTHY,
    ApiView,
    DeviceKey,
    Truth,
    says_unhealthy_or_removed,
)

PRESENCE = "presence"
HEALTH = "health"
HOLDER = "holder"
KINDS = (PRESENCE, HEALTH, HOLDER)


@dataclass(frozen=True)
class Difference:
    key: DeviceKey
    kind: str
    truth: str
    service: str

    def describe(self) -> str:
        return f"{self.kind} of {self.key}: truth {self.truth}, service {self.service}"


def _holders_text(holders: frozenset[str]) -> str:
    return ",".join(sorted(holders)) or "none"


def differences(truth: Truth, api: ApiView) -> list[Difference]:
    """Every way the service's answer differs from the truth, on the nodes that answered.

    - presence: the plugin lists the device and the service has it removed (or does not know
      it), or the plugin does not list it and the service has it present; a derived device the
      service calls "Unhealthy, may be unhealthy or removed" is right when the truth is either.
    - health: both have it present and the health differs (Unknown, for a stale node, differs
      from everything); the ambiguous derived answer is right for an Unhealthy device.
    - holder: the pods holding the device differ (one too many, one missing, another pod).
    """
    found: list[Difference] = []
    keys = set(truth.devices) | set(api.devices) | set(truth.holders) | set(api.holders)
    for key in sorted(k for k in keys if k.node in truth.nodes):
        real = truth.devices.get(key)
        said = api.devices.get(key)
        said_present = said is not None and said.present
        if real is not None and not said_present:
            found.append(Difference(key, PRESENCE, "present", "removed" if said else "not known"))
        elif real is None and said is not None and said_present:
            if not (truth.is_derived(key) and says_unhealthy_or_removed(said)):
                detail = f" ({said.health_detail})" if said.health_detail else ""
                found.append(Difference(key, PRESENCE, "absent", f"present {said.health}{detail}"))
        elif real is not None and said is not None and real.health != said.health:
            ambiguous_ok = (
                real.health == UNHEALTHY
                and truth.is_derived(key)
                and says_unhealthy_or_removed(said)
            )
            if not ambiguous_ok:
                found.append(Difference(key, HEALTH, real.health, said.health))
        real_holders = truth.holders.get(key, frozenset())
        said_holders = api.holders.get(key, frozenset())
        if real_holders != said_holders:
            found.append(
                Difference(key, HOLDER, _holders_text(real_holders), _holders_text(said_holders))
            )
    return found


@dataclass
class Overdue:
    """A difference older than the settling window, seen in one sample."""

    difference: Difference
    age: float
    first: bool  # the sample in which it first passed the window
    # It was there already when the last restart touching its node ended: the service did
    # not put right what a restart left, as opposed to getting a calm change wrong.
    carried_over_restart: bool = False


class MismatchTracker:
    """Keeps when each difference was first seen, and gives those older than `settle`.

    A difference's age counts from when it was first seen, or from when its node's whole
    path (simulated node, agent, service, API server) was last back after a restart, which
    is later: a restart gives the service the window again. A difference not seen in a
    sample (or on a node that did not answer) is over."""

    def __init__(self, settle: float) -> None:
        self.settle = settle
        self._first_seen: dict[tuple[DeviceKey, str], float] = {}
        self._reported: set[tuple[DeviceKey, str]] = set()

    def observe(
        self,
        now: float,
        found: list[Difference],
        calm_since: Callable[[str], float],
    ) -> list[Overdue]:
        current = {(d.key, d.kind): d for d in found}
        for gone in set(self._first_seen) - set(current):
            del self._first_seen[gone]
            self._reported.discard(gone)
        overdue: list[Overdue] = []
        for ident, difference in current.items():
            first = self._first_seen.setdefault(ident, now)
            calm = calm_since(difference.key.node)
            age = now - max(first, calm)
            if age > self.settle:
                reported = ident in self._reported
                overdue.append(Overdue(difference, age, not reported, first <= calm))
                self._reported.add(ident)
        return overdue
