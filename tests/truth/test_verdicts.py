"""Events and alerts judged against the truth's history: false ones counted, honest ones
not, and the alerts that should have come and did not."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from devicedeck.truth.disruptions import EVERY_NODE, Disruptions
from devicedeck.truth.history import TruthHistory
from devicedeck.truth.model import HEALTHY, UNHEALTHY, DeviceKey, Truth, TruthDevice
from devicedeck.truth.verdicts import (
    ALERT_REMOVED,
    ALERT_UNHEALTHY,
    NEVER,
    alerts_left_firing,
    device_alerts,
    judge_alerts,
    judge_events,
    missing_alerts,
)

GPU = DeviceKey("gpu-a", "nvidia.com/gpu", "GPU-1")
GPU2 = DeviceKey("gpu-a", "nvidia.com/gpu", "GPU-2")
DONGLE = DeviceKey("dongle-b", "example.com/dongle", "dongle-4")
T0 = 1_800_000_000.0
SETTLE = 5.0


def at(seconds: float) -> str:
    return datetime.fromtimestamp(T0 + seconds, UTC).isoformat()


def history_of(readings: list[tuple[float, dict[DeviceKey, str]]]) -> TruthHistory:
    history = TruthHistory()
    for seconds, devices in readings:
        truth = Truth(
            frozenset({"gpu-a", "dongle-b"}),
            {k: TruthDevice(h) for k, h in devices.items()},
            {},
            frozenset({("dongle-b", "example.com/dongle")}),
        )
        history.record_reading(T0 + seconds, truth)
    return history


def event(kind: str, key: DeviceKey, seconds: float, health: str | None = None) -> dict[str, Any]:
    return {
        "kind": kind,
        "at": at(seconds),
        "node": key.node,
        "resource": key.resource,
        "device_id": key.device_id,
        "after": {"health": health} if health else None,
        "actor": "agent",
    }


def alert_message(
    name: str, key: DeviceKey, starts: float, ends: float | None = None
) -> dict[str, Any]:
    return {
        "alerts": [
            {
                "status": "firing" if ends is None else "resolved",
                "labels": {
                    "alertname": name,
                    "node": key.node,
                    "resource": key.resource,
                    "device": key.device_id,
                },
                "startsAt": at(starts),
                "endsAt": NEVER if ends is None else at(ends),
                "fingerprint": f"{name}{key}",
            }
        ]
    }


ALWAYS_THERE = [(float(s), {GPU: HEALTHY, GPU2: HEALTHY, DONGLE: HEALTHY}) for s in range(60)]


def test_a_removal_event_for_a_device_that_never_left_is_false() -> None:
    verdicts = judge_events(
        [event("device_removed", GPU, 30)], history_of(ALWAYS_THERE), Disruptions(), SETTLE, T0
    )
    assert verdicts.judged == 1
    assert len(verdicts.false) == 1 and "device_removed (removed) of gpu-a" in verdicts.false[0]


def test_events_true_to_a_change_inside_the_window_are_not_false() -> None:
    readings = [(0.0, {GPU: HEALTHY, GPU2: HEALTHY}), (10.0, {GPU2: UNHEALTHY})]
    history = history_of(readings)
    # A flap shorter than a reading: only the action says it happened.
    history.record_action(GPU2, T0 + 20.2, HEALTHY)
    history.record_action(GPU2, T0 + 20.4, UNHEALTHY)
    events = [
        event("device_removed", GPU, 12),
        event("health_changed", GPU2, 13, UNHEALTHY),
        event("health_changed", GPU2, 23, UNHEALTHY),
        event("health_changed", GPU2, 24, HEALTHY),  # not a claim the oracle judges
    ]
    verdicts = judge_events(events, history, Disruptions(), SETTLE, T0)
    assert (verdicts.judged, verdicts.false) == (3, [])


def test_an_event_long_after_the_change_is_false() -> None:
    history = history_of([(0.0, {GPU: HEALTHY}), (10.0, {GPU: UNHEALTHY}), (11.0, {GPU: HEALTHY})])
    verdicts = judge_events(
        [event("health_changed", GPU, 30, UNHEALTHY)], history, Disruptions(), SETTLE, T0
    )
    assert len(verdicts.false) == 1


def test_a_restart_stretches_the_window_and_unknown_truth_is_unjudged() -> None:
    history = history_of([(0.0, {GPU: HEALTHY}), (10.0, {GPU: UNHEALTHY}), (11.0, {GPU: HEALTHY})])
    disruptions = Disruptions()
    disruptions.begin("restart-service", EVERY_NODE, T0 + 12).end = T0 + 40
    verdicts = judge_events(
        [event("health_changed", GPU, 42, UNHEALTHY)], history, disruptions, SETTLE, T0
    )
    assert verdicts.false == []

    history = history_of([(0.0, {GPU: HEALTHY})])
    history.record_reading(T0 + 10, Truth(frozenset(), {}, {}, frozenset()), ["gpu-a"])
    verdicts = judge_events([event("device_removed", GPU, 12)], history, Disruptions(), SETTLE, T0)
    assert (verdicts.false, len(verdicts.unjudged)) == ([], 1)


def test_on_a_derived_node_either_claim_is_right_for_either_state() -> None:
    history = history_of([(0.0, {DONGLE: HEALTHY}), (10.0, {})])
    events = [event("health_changed", DONGLE, 11, UNHEALTHY), event("device_removed", DONGLE, 12)]
    assert judge_events(events, history, Disruptions(), SETTLE, T0).false == []
    tapped = history_of([(0.0, {GPU: HEALTHY}), (10.0, {})])
    claim = [event("health_changed", GPU, 11, UNHEALTHY)]
    assert len(judge_events(claim, tapped, Disruptions(), SETTLE, T0).false) == 1


def test_false_missing_and_left_firing_alerts() -> None:
    readings: list[tuple[float, dict[DeviceKey, str]]] = [
        (float(s), {GPU: HEALTHY, GPU2: HEALTHY, DONGLE: HEALTHY}) for s in range(10)
    ]
    # GPU unhealthy from 10 to 30 (alerted), GPU2 unplugged from 10 to 30 (never alerted).
    readings += [(float(s), {GPU: UNHEALTHY, DONGLE: HEALTHY}) for s in range(10, 30)]
    readings += [(float(s), {GPU: HEALTHY, GPU2: HEALTHY, DONGLE: HEALTHY}) for s in range(30, 60)]
    history = history_of(readings)
    messages = [
        alert_message(ALERT_UNHEALTHY, GPU, 11),
        alert_message(ALERT_UNHEALTHY, GPU, 11),  # delivered twice: one alert
        alert_message(ALERT_UNHEALTHY, GPU, 11, ends=31),
        alert_message(ALERT_REMOVED, DONGLE, 40),  # the dongle never left
    ]
    alerts = device_alerts(messages)
    assert len(alerts) == 2
    judged = judge_alerts(alerts, history, Disruptions(), SETTLE, T0)
    assert judged.judged == 2
    assert [text.split(" from ")[0] for text in judged.false] == [
        "DevicedeckDeviceRemoved of dongle-b example.com/dongle dongle-4"
    ]
    missing = missing_alerts(alerts, history, Disruptions(), SETTLE, 5.0, T0 + 60)
    assert [text.split(":")[0] for text in missing] == [
        "DevicedeckDeviceRemoved of gpu-a nvidia.com/gpu GPU-2"
    ]
    left = alerts_left_firing(alerts, history, SETTLE, T0 + 60)
    assert [text.split(" from ")[0] for text in left] == [
        "DevicedeckDeviceRemoved of dongle-b example.com/dongle dongle-4"
    ]


def test_no_alert_is_owed_for_a_short_change_or_during_a_restart() -> None:
    readings: list[tuple[float, dict[DeviceKey, str]]] = [(0.0, {GPU: HEALTHY})]
    readings += [(3.0, {GPU: UNHEALTHY}), (6.0, {GPU: HEALTHY})]
    readings += [(20.0, {GPU: UNHEALTHY}), (50.0, {GPU: HEALTHY})]
    history = history_of(readings)
    disruptions = Disruptions()
    disruptions.begin("kill-agent", "gpu-a", T0 + 25).end = T0 + 30
    assert missing_alerts([], history, disruptions, SETTLE, 5.0, T0 + 60) == []
    assert len(missing_alerts([], history, Disruptions(), SETTLE, 5.0, T0 + 60)) == 1


def test_the_window_reaches_back_over_overlapping_restarts() -> None:
    disruptions = Disruptions()
    disruptions.begin("kill-agent", "gpu-a", 100).end = 120
    disruptions.begin("restart-service", EVERY_NODE, 90).end = 105
    assert disruptions.window_start("gpu-a", 122, 5) == 85
    assert disruptions.window_start("dongle-b", 122, 5) == 117
    assert disruptions.window_start("dongle-b", 108, 5) == 85


def test_an_unhealthy_device_since_unplugged_may_keep_its_alert() -> None:
    readings: list[tuple[float, dict[DeviceKey, str]]] = [(0.0, {GPU: HEALTHY})]
    readings += [(10.0, {GPU: UNHEALTHY}), (20.0, {})]
    history = history_of(readings)
    alerts = device_alerts(
        [alert_message(ALERT_UNHEALTHY, GPU, 11), alert_message(ALERT_REMOVED, GPU, 21)]
    )
    assert alerts_left_firing(alerts, history, SETTLE, T0 + 60) == []
    # Back and healthy: both should have ended.
    history.record_reading(
        T0 + 30, Truth(frozenset({"gpu-a"}), {GPU: TruthDevice(HEALTHY)}, {}, frozenset())
    )
    assert len(alerts_left_firing(alerts, history, SETTLE, T0 + 60)) == 2
