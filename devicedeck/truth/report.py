"""What a run found: counts (the ones that must be zero, and the others), with examples."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

EXAMPLES = 10


@dataclass
class Report:
    seed: int
    settle: float
    actions: int = 0
    actions_by_kind: dict[str, int] = field(default_factory=dict)
    actions_refused: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    samples: int = 0
    samples_unanswered: int = 0
    # Must be zero.
    mismatch_samples: dict[str, int] = field(default_factory=dict)
    mismatches: dict[str, int] = field(default_factory=dict)
    # Of those, the ones already there when a restart touching their node ended.
    mismatches_after_restart: int = 0
    false_events: int = 0
    false_alerts: int = 0
    missing_alerts: int = 0
    alerts_left_firing: int = 0
    # For the record.
    events_judged: int = 0
    events_unjudged: int = 0
    alerts_judged: int = 0
    alerts_unjudged: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)
    stopped_early: bool = False
    interrupted: bool = False

    def example(self, what: str, text: str) -> None:
        found = self.examples.setdefault(what, [])
        if len(found) < EXAMPLES:
            found.append(text)

    @property
    def failures(self) -> dict[str, int]:
        return {
            "mismatch samples": sum(self.mismatch_samples.values()),
            "false events": self.false_events,
            "false alerts": self.false_alerts,
            "missing alerts": self.missing_alerts,
            "alerts left firing": self.alerts_left_firing,
        }

    @property
    def clean(self) -> bool:
        return not any(self.failures.values())

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "failures": self.failures, "clean": self.clean}

    def text(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.actions_by_kind.items()))
        refused = sum(self.actions_refused.values())
        lines = [
            f"truth oracle: seed {self.seed}, {self.actions} actions ({kinds}; "
            f"{refused} more tried and refused or not possible) in {self.seconds:.0f} s",
            f"settling window {self.settle:g} s; {self.samples} samples "
            f"({self.samples_unanswered} without an answer from the service)",
            "",
        ]
        by_kind = Counter(self.mismatch_samples)
        for name, count in self.failures.items():
            detail = ""
            if name == "mismatch samples" and count:
                episodes = ", ".join(
                    f"{k} {v} in {self.mismatches.get(k, 0)} episodes"
                    for k, v in sorted(by_kind.items())
                )
                left = self.mismatches_after_restart
                detail = f" ({episodes}; {left} episodes left by a restart)"
            lines.append(f"  {name:<20} {count}{detail}")
        lines.append(
            f"  (judged {self.events_judged} events, {self.alerts_judged} alerts; "
            f"unjudged while a node was restarting: {self.events_unjudged} events, "
            f"{self.alerts_unjudged} alerts)"
        )
        for what, texts in sorted(self.examples.items()):
            lines.append("")
            lines.append(f"{what}:")
            lines.extend(f"  {t}" for t in texts)
        if self.interrupted:
            lines.append("")
            lines.append("interrupted: the counts cover the actions taken until then")
        if self.stopped_early:
            lines.append("")
            lines.append("stopped at the first mismatch; --keep-going runs every action")
        lines.append("")
        lines.append("OK: the service told the truth" if self.clean else "FAILED")
        return "\n".join(lines)
