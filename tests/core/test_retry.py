"""The one back-off used by every retry loop: the agent's pusher, kubelet reader and taps, the
cluster watch, the live-update listener and the simulated kubelet's plugin watcher."""

from __future__ import annotations

import random

import pytest

from devicedeck.retry import FULL_JITTER, NO_JITTER, Backoff


def test_delays_double_from_base_up_to_the_cap() -> None:
    backoff = Backoff(0.5, 5.0, jitter=NO_JITTER)
    assert [backoff.next_delay() for _ in range(7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert backoff.failures == 7


def test_a_long_outage_stays_at_the_cap() -> None:
    backoff = Backoff(0.5, 30.0, jitter=NO_JITTER)
    delays = [backoff.next_delay() for _ in range(5000)]
    assert delays[-1] == 30.0
    assert max(delays) == 30.0


def test_reset_after_a_success_starts_again_from_base() -> None:
    backoff = Backoff(1.0, 60.0, jitter=NO_JITTER)
    for _ in range(4):
        backoff.next_delay()
    assert backoff.ceiling() == 16.0
    backoff.reset()
    assert backoff.failures == 0
    assert backoff.ceiling() == 1.0
    assert backoff.next_delay() == 1.0
    assert backoff.next_delay() == 2.0


@pytest.mark.parametrize("jitter", [FULL_JITTER, 0.2, 0.5])
def test_jittered_delays_stay_within_their_bounds(jitter: float) -> None:
    backoff = Backoff(0.5, 4.0, random.Random(7), jitter=jitter)
    seen: list[tuple[float, float]] = []
    for _ in range(200):
        ceiling = backoff.ceiling()
        delay = backoff.next_delay()
        assert ceiling * (1 - jitter) <= delay <= ceiling
        seen.append((ceiling, delay))
        if len(seen) % 10 == 0:
            backoff.reset()
    # The ceilings follow the doubling, and the delays are really spread, not all at one end.
    assert {c for c, _ in seen} == {0.5, 1.0, 2.0, 4.0}
    capped = [d for c, d in seen if c == 4.0]
    assert max(capped) - min(capped) > 4.0 * jitter / 2


def test_full_jitter_spreads_clients_that_failed_together() -> None:
    """A hundred agents that lost the service at the same moment do not retry in step."""
    clients = [Backoff(0.5, 30.0, random.Random(seed)) for seed in range(100)]
    for client in clients:
        for _ in range(5):
            client.next_delay()
    fifth_retry = sorted(client.next_delay() for client in clients)
    assert fifth_retry[0] < 4.0 and fifth_retry[-1] > 12.0
    assert len({round(d, 3) for d in fifth_retry}) > 90


@pytest.mark.parametrize(
    ("base", "cap", "jitter"), [(0, 1, 0.5), (1, 0, 0.5), (-1, 1, 0.5), (1, 1, 1.5), (1, 1, -0.1)]
)
def test_nonsense_settings_are_refused(base: float, cap: float, jitter: float) -> None:
    with pytest.raises(ValueError, match="back-off"):
        Backoff(base, cap, jitter=jitter)
