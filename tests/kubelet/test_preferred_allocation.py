"""The NUMA policy behind GetPreferredAllocation."""

from __future__ import annotations

from devicedeck.kubelet.preferred_allocation import choose_preferred_devices

# Three NUMA nodes: node 0 has a0..a3, node 1 has b0..b1, node 2 has c0..c2; x0, x1 have none.
NUMA = {
    **{f"a{i}": (0,) for i in range(4)},
    **{f"b{i}": (1,) for i in range(2)},
    **{f"c{i}": (2,) for i in range(3)},
}
ALL = [*NUMA, "x0", "x1"]


def choose(
    size: int, must: list[str] | None = None, available: list[str] | None = None
) -> list[str]:
    return choose_preferred_devices(available or ALL, must or [], size, NUMA)


def test_fits_on_the_smallest_node_that_has_room() -> None:
    # b (2 free) fits 2 exactly and leaves the bigger nodes whole.
    assert choose(2) == ["b0", "b1"]
    assert choose(3) == ["c0", "c1", "c2"]
    assert choose(4) == ["a0", "a1", "a2", "a3"]


def test_prefers_the_node_of_required_devices() -> None:
    assert choose(2, ["a2"]) == ["a2", "a0"]
    assert choose(3, ["c1"]) == ["c1", "c0", "c2"]


def test_spreads_over_the_fewest_nodes_when_one_is_not_enough() -> None:
    assert choose(6) == ["a0", "a1", "a2", "a3", "c0", "c1"]
    chosen = choose(8)
    assert chosen[:4] == ["a0", "a1", "a2", "a3"] and set(chosen[4:]) == {"c0", "c1", "c2", "b0"}


def test_devices_without_topology_come_last() -> None:
    assert choose(10)[-1] == "x0"
    assert choose_preferred_devices(["x0", "x1", "x2"], [], 2, {}) == ["x0", "x1"]


def test_required_devices_and_small_pools() -> None:
    assert choose(2, ["b0", "c0"]) == ["b0", "c0"]
    assert choose(3, available=["a0", "b0"]) == ["a0", "b0"]
    assert choose(1, ["a1", "a1"]) == ["a1"]


def test_a_device_on_two_nodes_is_picked_once() -> None:
    numa = {"d0": (0, 1), "d1": (0,), "d2": (1,)}
    assert choose_preferred_devices(["d0", "d1", "d2"], [], 2, numa) == ["d0", "d1"]
    picked = choose_preferred_devices(["d0", "d1", "d2"], [], 3, numa)
    assert sorted(picked) == ["d0", "d1", "d2"]
