"""Restarts and kills the oracle causes, and the windows they give the service.

A disruption of a node (its simulated node or its agent restarting) or of everything (the
service or the API server restarting) lasts from the kill until the restarted process
answers again. While it lasts the service may be behind, so differences are not counted,
and an event or alert may be judged against the truth from before it began."""

from __future__ import annotations

from dataclasses import dataclass, field

EVERY_NODE = "*"


@dataclass
class Disruption:
    what: str
    node: str  # a node name, or EVERY_NODE
    start: float
    end: float | None = None


@dataclass
class Disruptions:
    items: list[Disruption] = field(default_factory=list)

    def begin(self, what: str, node: str, at: float) -> Disruption:
        disruption = Disruption(what, node, at)
        self.items.append(disruption)
        return disruption

    def _of(self, node: str) -> list[Disruption]:
        return [d for d in self.items if d.node in (node, EVERY_NODE)]

    def active(self, node: str) -> bool:
        return any(d.end is None for d in self._of(node))

    def any_active(self) -> bool:
        return any(d.end is None for d in self.items)

    def calm_since(self, node: str) -> float:
        """When the node's last disruption ended (0 if none did)."""
        ends = [d.end for d in self._of(node) if d.end is not None]
        return max(ends, default=0.0)

    def window_start(self, node: str, at: float, settle: float) -> float:
        """How far back the truth may justify what the service said at `at`: the settling
        window, stretched to before any disruption of the node that overlaps it."""
        start = at - settle
        changed = True
        while changed:
            changed = False
            for d in self._of(node):
                end = at if d.end is None else d.end
                if d.start - settle < start and end >= start and d.start <= at:
                    start = d.start - settle
                    changed = True
        return start
