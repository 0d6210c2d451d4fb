"""The derived-health rule on its own: which devices not offered by the kubelet are unhealthy,
which went, and which the Node's counts cannot tell."""

from __future__ import annotations

from devicedeck.inventory.write.derived_health import (
    GONE,
    UNCERTAIN,
    UNHEALTHY_PRESENT,
    Basis,
    Judgement,
    StatusCounts,
    judge,
)

SIX = [f"dongle-{i}" for i in range(6)]


def _offered_but(*missing: str) -> set[str]:
    return set(SIX) - set(missing)


def _all_healthy() -> Basis:
    first = judge(None, SIX, SIX, StatusCounts(6, 6))
    assert first.presence == {}
    assert first.basis is not None
    return first.basis


def _step(basis: Basis | None, offered: set[str], capacity: int) -> Judgement:
    return judge(basis, SIX, offered, StatusCounts(capacity, len(offered)))


def test_one_device_leaving_while_capacity_stays_is_unhealthy() -> None:
    judged = _step(_all_healthy(), _offered_but("dongle-4"), 6)
    assert judged.presence == {"dongle-4": UNHEALTHY_PRESENT}
    assert judged.summary() is None


def test_one_device_leaving_as_capacity_falls_is_removed_and_the_unhealthy_one_stays() -> None:
    failed = _step(_all_healthy(), _offered_but("dongle-4"), 6)
    unplugged = _step(failed.basis, _offered_but("dongle-4", "dongle-5"), 5)
    assert unplugged.presence == {"dongle-4": UNHEALTHY_PRESENT, "dongle-5": GONE}


def test_two_leaving_as_capacity_falls_by_one_cannot_be_told_apart() -> None:
    both = _step(_all_healthy(), _offered_but("dongle-4", "dongle-5"), 5)
    assert both.presence == {"dongle-4": UNCERTAIN, "dongle-5": UNCERTAIN}
    assert both.summary() == {"unhealthy": 1, "removed": 1, "among": ["dongle-4", "dongle-5"]}


def test_a_flap_during_the_unplug_is_never_taken_for_the_removal() -> None:
    failed = _step(_all_healthy(), _offered_but("dongle-4"), 6)
    # dongle-1 flaps while dongle-5 is pulled out. Two left the offer as capacity fell: any
    # of the three not offered may be the one that went (dongle-4 unplugged while dongle-5
    # failed looks the same).
    mixed = _step(failed.basis, _offered_but("dongle-4", "dongle-5", "dongle-1"), 5)
    assert mixed.presence == dict.fromkeys(("dongle-1", "dongle-4", "dongle-5"), UNCERTAIN)
    assert mixed.summary() == {
        "unhealthy": 2,
        "removed": 1,
        "among": ["dongle-1", "dongle-4", "dongle-5"],
    }
    # dongle-1 is offered again: it was unhealthy, and the counts still cannot say which of
    # the other two went.
    back = _step(mixed.basis, _offered_but("dongle-4", "dongle-5"), 5)
    assert back.presence == {"dongle-4": UNCERTAIN, "dongle-5": UNCERTAIN}
    assert back.summary() == {"unhealthy": 1, "removed": 1, "among": ["dongle-4", "dongle-5"]}


def test_an_unplug_beside_a_failure_and_a_recovery_names_no_device() -> None:
    # dongle-4 is unhealthy and dongle-2 too; then, within one observation, dongle-4 is
    # unplugged, dongle-1 fails and dongle-2 recovers. Read one change at a time, dongle-1
    # leaving as capacity falls would be the one that went.
    two = _step(_one_unhealthy(), _offered_but("dongle-4", "dongle-2"), 6)
    churn = _step(two.basis, _offered_but("dongle-4", "dongle-1"), 5)
    assert churn.presence == {"dongle-4": UNCERTAIN, "dongle-1": UNCERTAIN}
    assert churn.summary() == {"unhealthy": 1, "removed": 1, "among": ["dongle-1", "dongle-4"]}


def test_a_removed_device_back_as_another_fails_names_no_device() -> None:
    # dongle-5 went; then dongle-5 is plugged back (offered), dongle-1 fails and the unhealthy
    # dongle-4 is unplugged: capacity stays, and dongle-5's return does not make dongle-1 gone.
    gone = _step(_one_unhealthy(), _offered_but("dongle-4", "dongle-5"), 5).basis
    swapped = _step(gone, _offered_but("dongle-4", "dongle-1"), 5)
    assert swapped.presence == {"dongle-4": UNCERTAIN, "dongle-1": UNCERTAIN}


def test_flaps_together_with_capacity_still_are_failures_and_recoveries() -> None:
    two = _step(_one_unhealthy(), _offered_but("dongle-4", "dongle-2"), 6)
    # dongle-2 recovers as dongle-1 and dongle-3 fail: nothing went, so each is as it shows.
    flaps = _step(two.basis, _offered_but("dongle-4", "dongle-1", "dongle-3"), 6)
    assert flaps.presence == dict.fromkeys(("dongle-1", "dongle-3", "dongle-4"), UNHEALTHY_PRESENT)


def test_a_flap_after_the_unplug_leaves_the_removed_device_removed() -> None:
    failed = _step(_all_healthy(), _offered_but("dongle-4"), 6)
    unplugged = _step(failed.basis, _offered_but("dongle-4", "dongle-5"), 5)
    flapped = _step(unplugged.basis, _offered_but("dongle-4", "dongle-5", "dongle-1"), 5)
    assert flapped.presence == {
        "dongle-4": UNHEALTHY_PRESENT,
        "dongle-5": GONE,
        "dongle-1": UNHEALTHY_PRESENT,
    }
    recovered = _step(flapped.basis, _offered_but("dongle-4", "dongle-5"), 5)
    assert recovered.presence == {"dongle-4": UNHEALTHY_PRESENT, "dongle-5": GONE}


def test_while_the_status_lags_a_device_that_left_is_uncertain_and_the_rest_stand() -> None:
    failed = _step(_all_healthy(), _offered_but("dongle-4"), 6)
    # The kubelet's list already lacks dongle-5; the Node's status still says 6 and 5.
    lagging = judge(failed.basis, SIX, _offered_but("dongle-4", "dongle-5"), StatusCounts(6, 5))
    assert lagging.presence == {"dongle-4": UNHEALTHY_PRESENT, "dongle-5": UNCERTAIN}
    assert lagging.basis == failed.basis


def test_a_device_the_agent_forgot_is_not_offered_not_gone() -> None:
    failed = _step(_all_healthy(), _offered_but("dongle-4"), 6)
    unplugged = _step(failed.basis, _offered_but("dongle-4", "dongle-5"), 5)
    # Known to the service, not listed by a restarted agent: the same observation.
    again = judge(
        unplugged.basis, SIX, _offered_but("dongle-4", "dongle-5"), StatusCounts(5, 4), {"dongle-5"}
    )
    assert again.presence == unplugged.presence


def test_an_unhealthy_device_unplugged_is_removed_when_it_is_the_only_one() -> None:
    failed = _step(_all_healthy(), _offered_but("dongle-4"), 6)
    pulled = _step(failed.basis, _offered_but("dongle-4"), 5)
    assert pulled.presence == {"dongle-4": GONE}


def test_an_unhealthy_one_unplugged_among_several_unhealthy_is_not_guessed() -> None:
    two = _step(
        _step(_all_healthy(), _offered_but("dongle-3"), 6).basis,
        _offered_but("dongle-3", "dongle-4"),
        6,
    )
    assert two.presence == {"dongle-3": UNHEALTHY_PRESENT, "dongle-4": UNHEALTHY_PRESENT}
    one_pulled = _step(two.basis, _offered_but("dongle-3", "dongle-4"), 5)
    assert one_pulled.presence == {"dongle-3": UNCERTAIN, "dongle-4": UNCERTAIN}
    assert one_pulled.summary() == {"unhealthy": 1, "removed": 1, "among": ["dongle-3", "dongle-4"]}


def test_a_removed_device_plugged_back_healthy_returns() -> None:
    unplugged = _step(_all_healthy(), _offered_but("dongle-5"), 5)
    assert unplugged.presence == {"dongle-5": GONE}
    back = _step(unplugged.basis, set(SIX), 6)
    assert back.presence == {}


def test_without_a_status_nothing_new_is_concluded_and_old_conclusions_stand() -> None:
    failed = _step(_all_healthy(), _offered_but("dongle-4"), 6)
    blind = judge(failed.basis, SIX, _offered_but("dongle-4", "dongle-2"), None)
    assert blind.presence == {"dongle-4": UNHEALTHY_PRESENT, "dongle-2": UNCERTAIN}
    assert judge(None, SIX, _offered_but("dongle-2"), None).presence == {"dongle-2": UNCERTAIN}


def test_the_basis_survives_its_json() -> None:
    basis = _step(_all_healthy(), _offered_but("dongle-4", "dongle-5"), 5).basis
    assert basis is not None
    assert Basis.from_json(basis.to_json()) == basis


def _one_unhealthy() -> Basis:
    judged = _step(_all_healthy(), _offered_but("dongle-4"), 6)
    assert judged.basis is not None
    return judged.basis


def test_after_a_gap_a_device_leaving_as_capacity_falls_beside_an_unhealthy_one_is_not_named() -> (
    None
):
    basis = _one_unhealthy()
    # Seen one change at a time, dongle-5 leaving as capacity falls is the one that went.
    seen = _step(basis, _offered_but("dongle-4", "dongle-5"), 5)
    assert seen.presence == {"dongle-4": UNHEALTHY_PRESENT, "dongle-5": GONE}
    # After a gap, dongle-4 may have gone while dongle-5 failed: the counts cannot tell.
    gap = judge(
        basis, SIX, _offered_but("dongle-4", "dongle-5"), StatusCounts(5, 4), after_gap=True
    )
    assert gap.presence == {"dongle-4": UNCERTAIN, "dongle-5": UNCERTAIN}
    assert gap.summary() == {"unhealthy": 1, "removed": 1, "among": ["dongle-4", "dongle-5"]}


def test_after_a_gap_the_counts_still_settle_what_they_can() -> None:
    basis = _one_unhealthy()
    unchanged = judge(basis, SIX, _offered_but("dongle-4"), StatusCounts(6, 5), after_gap=True)
    assert unchanged.presence == {"dongle-4": UNHEALTHY_PRESENT}
    unplugged = judge(basis, SIX, _offered_but("dongle-4"), StatusCounts(5, 5), after_gap=True)
    assert unplugged.presence == {"dongle-4": GONE}
    failed = judge(
        basis, SIX, _offered_but("dongle-4", "dongle-1"), StatusCounts(6, 4), after_gap=True
    )
    assert failed.presence == {"dongle-4": UNHEALTHY_PRESENT, "dongle-1": UNHEALTHY_PRESENT}
    # A device removed before stays removed.
    gone = _step(basis, _offered_but("dongle-4", "dongle-5"), 5).basis
    again = judge(
        gone, SIX, _offered_but("dongle-4", "dongle-5"), StatusCounts(5, 4), after_gap=True
    )
    assert again.presence == {"dongle-4": UNHEALTHY_PRESENT, "dongle-5": GONE}


def test_a_removed_device_may_be_back_and_unhealthy_when_capacity_rises() -> None:
    gone = _step(_one_unhealthy(), _offered_but("dongle-4", "dongle-5"), 5).basis
    # While the service was away, dongle-5 was plugged in again and failed: capacity is back
    # to six, and nothing new is offered.
    back = judge(
        gone, SIX, _offered_but("dongle-4", "dongle-5"), StatusCounts(6, 4), after_gap=True
    )
    assert back.presence == {"dongle-4": UNHEALTHY_PRESENT, "dongle-5": UNHEALTHY_PRESENT}
    # Without a gap too: a bad device reseated registers unhealthy, and is never offered.
    seen = judge(gone, SIX, _offered_but("dongle-4", "dongle-5"), StatusCounts(6, 4))
    assert seen.presence == {"dongle-4": UNHEALTHY_PRESENT, "dongle-5": UNHEALTHY_PRESENT}
    # Capacity back while two removed devices are known and one is unhealthy: which, the
    # counts cannot say.
    two_gone = judge(None, SIX, _offered_but("dongle-4", "dongle-5"), StatusCounts(4, 4)).basis
    one_back = judge(two_gone, SIX, _offered_but("dongle-4", "dongle-5"), StatusCounts(5, 4))
    assert one_back.presence == {"dongle-4": UNCERTAIN, "dongle-5": UNCERTAIN}
