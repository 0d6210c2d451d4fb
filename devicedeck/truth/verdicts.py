"""Judging the service's events and webhook alerts against the truth's history.

- A false event: a `device_removed` event, or a `health_changed` event to Unhealthy, for a
  device whose truth was not removed (not unhealthy) at any moment of the window before it.
- A false alert: a firing DevicedeckDeviceRemoved or DevicedeckDeviceUnhealthy alert judged
  the same way at its `startsAt`.
- A missing alert: the truth had a device removed (unhealthy) for longer than the settling
  window plus the alert delay, with its node answering throughout, and no alert of that name
  for the device was firing at any moment from the start of it until a window after its end.
- An alert left firing: at the end of the run an alert still fires for a device whose truth
  has been out of that state for longer than the settling window (an unhealthy device since
  unplugged may keep its unhealthy alert: its last known health is Unhealthy).

On a node whose health is derived either alert and either event is right for either state.
Events and alerts where the truth was unknown instead (its node restarting) are counted apart
as unjudged.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from devicedeck.truth.disruptions import Disruptions
from devicedeck.truth.history import (
    FALSE,
    REMOVED,
    STATE_ABSENT,
    STATE_UNKNOWN,
    UNHEALTHY_CONDITION,
    UNJUDGED,
    TruthHistory,
    condition_states,
    judge,
)
from devicedeck.truth.model import UNHEALTHY, DeviceKey

ALERT_REMOVED = "DevicedeckDeviceRemoved"
ALERT_UNHEALTHY = "DevicedeckDeviceUnhealthy"
ALERT_CONDITIONS = {ALERT_REMOVED: REMOVED, ALERT_UNHEALTHY: UNHEALTHY_CONDITION}
NEVER = "0001-01-01T00:00:00Z"


def parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class Verdicts:
    false: list[str] = field(default_factory=list)
    unjudged: list[str] = field(default_factory=list)
    judged: int = 0


def event_condition(event: dict[str, Any]) -> str | None:
    """The condition an event claims of its device, or None for events the oracle ignores."""
    if event.get("kind") == "device_removed":
        return REMOVED
    after = event.get("after") or {}
    if event.get("kind") == "health_changed" and after.get("health") == UNHEALTHY:
        return UNHEALTHY_CONDITION
    return None


def judge_events(
    events: Iterable[dict[str, Any]],
    history: TruthHistory,
    disruptions: Disruptions,
    settle: float,
    since: float,
) -> Verdicts:
    verdicts = Verdicts()
    for event in events:
        condition = event_condition(event)
        if condition is None or not event.get("at") or not event.get("device_id"):
            continue
        at = parse_time(event["at"])
        if at < since:
            continue
        key = DeviceKey(event["node"], event["resource"], event["device_id"])
        start = disruptions.window_start(key.node, at, settle)
        verdict = judge(history, key, condition, at, start)
        verdicts.judged += 1
        text = f"{event['kind']} ({condition}) of {key} at {event['at']} by {event.get('actor')}"
        if verdict == FALSE:
            verdicts.false.append(text)
        elif verdict == UNJUDGED:
            verdicts.unjudged.append(text)
    return verdicts


@dataclass(frozen=True)
class Alert:
    """One device alert from its firing message to its resolved one (None while firing)."""

    name: str
    key: DeviceKey
    starts: float
    ends: float | None
    text: str


def device_alerts(messages: Iterable[dict[str, Any]]) -> list[Alert]:
    """The device alerts in webhook messages, a firing one joined with its resolved one by
    fingerprint; a message repeated (at-least-once delivery) counts once."""
    firing: dict[tuple[str, str], dict[str, Any]] = {}
    ended: dict[tuple[str, str], float] = {}
    for message in messages:
        for alert in message.get("alerts") or []:
            labels = alert.get("labels") or {}
            if labels.get("alertname") not in ALERT_CONDITIONS:
                continue
            ident = (str(alert.get("fingerprint")), str(alert.get("startsAt")))
            if alert.get("status") == "firing":
                firing.setdefault(ident, alert)
            elif alert.get("endsAt") and alert["endsAt"] != NEVER:
                ended[ident] = parse_time(alert["endsAt"])
    alerts = []
    for ident, alert in firing.items():
        labels = alert["labels"]
        key = DeviceKey(labels["node"], labels.get("resource", ""), labels.get("device", ""))
        text = f"{labels['alertname']} of {key} from {alert['startsAt']}"
        alerts.append(
            Alert(labels["alertname"], key, parse_time(alert["startsAt"]), ended.get(ident), text)
        )
    return sorted(alerts, key=lambda a: (a.starts, a.text))


def judge_alerts(
    alerts: list[Alert],
    history: TruthHistory,
    disruptions: Disruptions,
    settle: float,
    since: float,
) -> Verdicts:
    verdicts = Verdicts()
    for alert in alerts:
        if alert.starts < since:
            continue
        start = disruptions.window_start(alert.key.node, alert.starts, settle)
        verdict = judge(history, alert.key, ALERT_CONDITIONS[alert.name], alert.starts, start)
        verdicts.judged += 1
        if verdict == FALSE:
            verdicts.false.append(alert.text)
        elif verdict == UNJUDGED:
            verdicts.unjudged.append(alert.text)
    return verdicts


def missing_alerts(
    alerts: list[Alert],
    history: TruthHistory,
    disruptions: Disruptions,
    settle: float,
    alert_delay: float,
    until: float,
) -> list[str]:
    missing = []
    for key in history.devices():
        derived = history.is_derived(key)
        for name, condition in ALERT_CONDITIONS.items():
            bad = condition_states(condition, derived)
            for start, end in _episodes(history, key, bad, until):
                if end - start <= settle + alert_delay:
                    continue
                names = set(ALERT_CONDITIONS) if derived else {name}
                covered = any(
                    a.key == key
                    and a.name in names
                    and a.starts <= end + settle
                    and (a.ends is None or a.ends >= start)
                    for a in alerts
                )
                if not covered and not _disrupted(disruptions, key.node, start, end):
                    missing.append(f"{name} of {key}: truth {condition} from {start:.1f}")
            if derived:
                break  # one episode of "unhealthy or removed" needs one alert of either name
    return missing


def _episodes(
    history: TruthHistory, key: DeviceKey, bad: frozenset[str], until: float
) -> list[tuple[float, float]]:
    """Stretches of time the device was continuously in one of the `bad` states."""
    episodes: list[tuple[float, float]] = []
    current: list[float] | None = None
    for start, end, state in history.spans(key, until):
        if state in bad:
            if current is None:
                current = [start, end]
            else:
                current[1] = end
        else:
            if current is not None:
                episodes.append((current[0], current[1]))
            current = None
    if current is not None:
        episodes.append((current[0], current[1]))
    return episodes


def _disrupted(disruptions: Disruptions, node: str, start: float, end: float) -> bool:
    return any(
        d.node in (node, "*") and d.start <= end and (d.end is None or d.end >= start)
        for d in disruptions.items
    )


def alerts_left_firing(
    alerts: list[Alert], history: TruthHistory, settle: float, until: float
) -> list[str]:
    left = []
    for alert in alerts:
        if alert.ends is not None:
            continue
        bad = condition_states(ALERT_CONDITIONS[alert.name], history.is_derived(alert.key))
        if alert.name == ALERT_UNHEALTHY:
            # An unhealthy device then unplugged was last known unhealthy: its alert may stay.
            bad |= {STATE_ABSENT}
        recent = history.states_between(alert.key, until - settle, until)
        if not recent & bad and STATE_UNKNOWN not in recent:
            left.append(alert.text)
    return left
