"""The oracle's rules, fed a truth and the service's answer: it counts each kind of error,
and lets the honest answers pass."""

from __future__ import annotations

from devicedeck.truth.compare import HEALTH, HOLDER, PRESENCE, MismatchTracker, differences
from devicedeck.truth.model import (
    HEALTHY,
    UNHEALTHY,
    ApiDevice,
    ApiView,
    DeviceKey,
    Truth,
    TruthDevice,
)

GPU = DeviceKey("gpu-a", "nvidia.com/gpu", "GPU-1")
DONGLE = DeviceKey("dongle-b", "example.com/dongle", "dongle-4")
OTHER_DONGLE = DeviceKey("dongle-b", "example.com/dongle", "dongle-5")
AMBIGUOUS = "Not offered by the kubelet: may be unhealthy or removed (no Node status)"


def truth(
    devices: dict[DeviceKey, str],
    holders: dict[DeviceKey, set[str]] | None = None,
    nodes: tuple[str, ...] = ("gpu-a", "dongle-b"),
) -> Truth:
    return Truth(
        frozenset(nodes),
        {k: TruthDevice(h) for k, h in devices.items()},
        {k: frozenset(v) for k, v in (holders or {}).items()},
        frozenset({("dongle-b", "example.com/dongle")}),
    )


def api(
    devices: dict[DeviceKey, ApiDevice], holders: dict[DeviceKey, set[str]] | None = None
) -> ApiView:
    return ApiView(devices, {k: frozenset(v) for k, v in (holders or {}).items()})


def kinds(found: list) -> list[tuple[DeviceKey, str]]:
    return [(d.key, d.kind) for d in found]


def test_agreement_is_no_difference() -> None:
    real = truth({GPU: HEALTHY, DONGLE: UNHEALTHY}, {GPU: {"ml/a"}})
    said = api({GPU: ApiDevice(True, HEALTHY), DONGLE: ApiDevice(True, UNHEALTHY)}, {GPU: {"ml/a"}})
    assert differences(real, said) == []


def test_a_present_device_the_service_removed_or_does_not_know() -> None:
    real = truth({GPU: HEALTHY, DONGLE: HEALTHY})
    said = api({GPU: ApiDevice(False, HEALTHY)})
    assert kinds(differences(real, said)) == [(DONGLE, PRESENCE), (GPU, PRESENCE)]


def test_the_wrong_device_removed() -> None:
    """dongle-5 was unplugged; the service removed dongle-4 and keeps dongle-5."""
    real = truth({DONGLE: UNHEALTHY})
    said = api({DONGLE: ApiDevice(False, UNHEALTHY), OTHER_DONGLE: ApiDevice(True, UNHEALTHY)})
    assert kinds(differences(real, said)) == [(DONGLE, PRESENCE), (OTHER_DONGLE, PRESENCE)]


def test_unhealthy_or_removed_is_honest_only_where_the_truth_is_one_of_the_two() -> None:
    ambiguous = ApiDevice(True, UNHEALTHY, AMBIGUOUS)
    # Removed, and the service says it may be: right.
    assert differences(truth({}), api({DONGLE: ambiguous})) == []
    # Unhealthy, and the service says it may be: right.
    assert differences(truth({DONGLE: UNHEALTHY}), api({DONGLE: ambiguous})) == []
    # Healthy: wrong.
    assert kinds(differences(truth({DONGLE: HEALTHY}), api({DONGLE: ambiguous}))) == [
        (DONGLE, HEALTH)
    ]
    # A plain Unhealthy for a removed device is wrong.
    plain = api({DONGLE: ApiDevice(True, UNHEALTHY)})
    assert kinds(differences(truth({}), plain)) == [(DONGLE, PRESENCE)]
    # A tapped device has its plugin's own word: no ambiguity is honest there.
    tapped = api({GPU: ApiDevice(True, UNHEALTHY, AMBIGUOUS)})
    assert kinds(differences(truth({}), tapped)) == [(GPU, PRESENCE)]


def test_health_differences_and_unknown() -> None:
    real = truth({GPU: HEALTHY, DONGLE: UNHEALTHY})
    said = api({GPU: ApiDevice(True, UNHEALTHY), DONGLE: ApiDevice(True, "Unknown")})
    found = differences(real, said)
    assert kinds(found) == [(DONGLE, HEALTH), (GPU, HEALTH)]
    assert found[1].describe() == (
        "health of gpu-a nvidia.com/gpu GPU-1: truth Healthy, service Unhealthy"
    )


def test_holders_duplicate_missing_and_late() -> None:
    real = truth({GPU: HEALTHY, DONGLE: HEALTHY}, {GPU: {"ml/a"}})
    duplicate = api(
        {GPU: ApiDevice(True, HEALTHY), DONGLE: ApiDevice(True, HEALTHY)}, {GPU: {"ml/a", "ml/b"}}
    )
    assert kinds(differences(real, duplicate)) == [(GPU, HOLDER)]
    missing = api({GPU: ApiDevice(True, HEALTHY), DONGLE: ApiDevice(True, HEALTHY)})
    assert kinds(differences(real, missing)) == [(GPU, HOLDER)]
    late_end = api(
        {GPU: ApiDevice(True, HEALTHY), DONGLE: ApiDevice(True, HEALTHY)},
        {GPU: {"ml/a"}, DONGLE: {"ml/gone"}},
    )
    found = differences(real, late_end)
    assert kinds(found) == [(DONGLE, HOLDER)]
    assert (found[0].truth, found[0].service) == ("none", "ml/gone")


def test_a_node_that_did_not_answer_is_not_judged() -> None:
    real = truth({GPU: HEALTHY}, nodes=("gpu-a",))
    said = api({GPU: ApiDevice(True, HEALTHY), DONGLE: ApiDevice(True, HEALTHY)})
    assert differences(real, said) == []


def test_a_difference_counts_only_past_the_settling_window() -> None:
    tracker = MismatchTracker(settle=5)
    found = differences(truth({GPU: HEALTHY}), api({GPU: ApiDevice(True, UNHEALTHY)}))
    calm = {"gpu-a": 0.0}
    assert tracker.observe(100, found, calm.__getitem__) == []
    assert tracker.observe(105, found, calm.__getitem__) == []
    [late] = tracker.observe(106, found, calm.__getitem__)
    assert late.first and late.age == 6
    [again] = tracker.observe(107, found, calm.__getitem__)
    assert not again.first
    # Fixed, then wrong again: a new episode with its own window.
    assert tracker.observe(108, [], calm.__getitem__) == []
    assert tracker.observe(109, found, calm.__getitem__) == []
    assert tracker.observe(115, found, calm.__getitem__)[0].first


def test_a_restart_gives_the_service_the_window_again() -> None:
    tracker = MismatchTracker(settle=5)
    found = differences(truth({GPU: HEALTHY}), api({GPU: ApiDevice(True, UNHEALTHY)}))
    calm = {"gpu-a": 0.0}
    tracker.observe(100, found, calm.__getitem__)
    calm["gpu-a"] = 104.0  # the agent answered again at 104
    assert tracker.observe(108, found, calm.__getitem__) == []
    [left] = tracker.observe(110, found, calm.__getitem__)
    assert left.carried_over_restart

    other = differences(truth({DONGLE: UNHEALTHY}), api({DONGLE: ApiDevice(True, HEALTHY)}))
    calm["dongle-b"] = 104.0
    tracker.observe(111, other, calm.__getitem__)
    [calm_change] = tracker.observe(117, other, calm.__getitem__)
    assert not calm_change.carried_over_restart
