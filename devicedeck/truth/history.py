"""The truth over time, per device, and the rules that judge the service's events and
alerts against it.

A device's state at any moment is healthy, unhealthy, absent (its plugin does not list it)
or unknown (its node did not answer: restarting, or not yet started). States come from the
readings, taken every second, and from the oracle's own actions at the moment it takes them,
so a flap shorter than a second still counts as a change."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from devicedeck.truth.model import HEALTHY, UNHEALTHY, DeviceKey, Truth

STATE_HEALTHY = "healthy"
STATE_UNHEALTHY = "unhealthy"
STATE_ABSENT = "absent"
STATE_UNKNOWN = "unknown"

REMOVED = "removed"
UNHEALTHY_CONDITION = "unhealthy"


def condition_states(condition: str, derived: bool) -> frozenset[str]:
    """The states that make a condition true. On a derived node the service cannot tell an
    unhealthy device from a removed one, so either state justifies either condition."""
    if derived:
        return frozenset({STATE_UNHEALTHY, STATE_ABSENT})
    return frozenset({STATE_ABSENT if condition == REMOVED else STATE_UNHEALTHY})


@dataclass
class _Timeline:
    times: list[float] = field(default_factory=list)
    states: list[str] = field(default_factory=list)

    def add(self, at: float, state: str) -> None:
        if self.states and self.states[-1] == state:
            return
        # Readings and actions come from one thread in time order, nearly; keep it sorted.
        index = bisect.bisect_right(self.times, at)
        self.times.insert(index, at)
        self.states.insert(index, state)

    def states_between(self, start: float, end: float) -> set[str]:
        """Every state the device was in at some moment of [start, end]."""
        index = bisect.bisect_right(self.times, start) - 1
        found = {self.states[index]} if index >= 0 else {STATE_UNKNOWN}
        for at, state in zip(self.times[index + 1 :], self.states[index + 1 :], strict=True):
            if at > end:
                break
            found.add(state)
        return found

    def spans(self, until: float) -> list[tuple[float, float, str]]:
        spans = []
        for i, (at, state) in enumerate(zip(self.times, self.states, strict=True)):
            end = self.times[i + 1] if i + 1 < len(self.times) else until
            spans.append((at, end, state))
        return spans


class TruthHistory:
    def __init__(self) -> None:
        self._timelines: dict[DeviceKey, _Timeline] = {}
        self.derived: set[tuple[str, str]] = set()

    def devices(self) -> list[DeviceKey]:
        return sorted(self._timelines)

    def is_derived(self, key: DeviceKey) -> bool:
        return (key.node, key.resource) in self.derived

    def set_state(self, key: DeviceKey, at: float, state: str) -> None:
        self._timelines.setdefault(key, _Timeline()).add(at, state)

    def record_reading(self, at: float, truth: Truth, unanswered: Iterable[str] = ()) -> None:
        """A reading: devices of nodes that answered are healthy, unhealthy or absent; every
        device known on a node that did not answer is unknown."""
        self.derived.update(truth.derived)
        for key, device in truth.devices.items():
            state = STATE_HEALTHY if device.health == HEALTHY else STATE_UNHEALTHY
            self.set_state(key, at, state)
        silent = set(unanswered)
        for key in list(self._timelines):
            if key.node in silent:
                self.set_state(key, at, STATE_UNKNOWN)
            elif key.node in truth.nodes and key not in truth.devices:
                self.set_state(key, at, STATE_ABSENT)

    def record_action(self, key: DeviceKey, at: float, action: str) -> None:
        """One of the oracle's own device actions, at the moment it was taken."""
        state = {
            HEALTHY: STATE_HEALTHY,
            UNHEALTHY: STATE_UNHEALTHY,
            "unplug": STATE_ABSENT,
            "plug": STATE_HEALTHY,
        }[action]
        self.set_state(key, at, state)

    def states_between(self, key: DeviceKey, start: float, end: float) -> set[str]:
        timeline = self._timelines.get(key)
        return timeline.states_between(start, end) if timeline else {STATE_UNKNOWN}

    def spans(self, key: DeviceKey, until: float) -> list[tuple[float, float, str]]:
        timeline = self._timelines.get(key)
        return timeline.spans(until) if timeline else []


JUSTIFIED = "justified"
FALSE = "false"
UNJUDGED = "unjudged"


def judge(history: TruthHistory, key: DeviceKey, condition: str, at: float, start: float) -> str:
    """Whether the service was right to say `condition` (removed, unhealthy) of a device at
    `at`: justified when the truth was in that state at some moment since `start` (the
    settling window before it, reaching back further over a restart in between) and up to a
    second after; unjudged when the truth was unknown then instead; false otherwise."""
    states = history.states_between(key, start, at + 1.0)
    if states & condition_states(condition, history.is_derived(key)):
        return JUSTIFIED
    if STATE_UNKNOWN in states:
        return UNJUDGED
    return FALSE
