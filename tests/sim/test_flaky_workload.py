"""Flaky devices in the seeded workload: a few devices of a resource take most of its flaps,
the same ones for the same seed, so the demo's reliability ranking tells a story at once; the
demo gives them to its GPU nodes only."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import pytest

from devicedeck.cli import build_parser
from devicedeck.demo.topology import TOPOLOGY, sim_node_args
from devicedeck.kubelet.deviceplugin import UNHEALTHY
from devicedeck.sim.node import PluginSpec, SimNode

from .helpers import wait_until

GPU = "nvidia.com/gpu"


def flaps_per_device(root: Path, seed: int, steps: int) -> tuple[set[str], Counter[str]]:
    """The workload's flaky GPUs, and how often each GPU turned Unhealthy over `steps`."""
    specs = [PluginSpec(GPU, 8, "gpu")]
    with SimNode(root, specs, workload_seed=seed, workload_interval=3600, flaky={GPU: 2}) as node:
        assert node.workload is not None
        plugin = node.plugins[GPU]
        wait_until(lambda: node.kubelet.manager.allocatable() == {GPU: 8})
        turned: Counter[str] = Counter()
        unhealthy: set[str] = set()
        for _ in range(steps):
            node.workload.step()
            now = {d.id for d in plugin.devices() if d.health == UNHEALTHY}
            turned.update(now - unhealthy)
            unhealthy = now
        return node.workload.flaky[GPU], turned


def test_flaky_devices_take_most_flaps_and_follow_the_seed(root: Path) -> None:
    flaky, turned = flaps_per_device(root / "a", seed=11, steps=150)
    assert len(flaky) == 2
    # A flaky device that sits among the free devices the workload keeps for pods by hand is
    # not flapped meanwhile, so the two need not both lead; together they take the most.
    [(leader, _)] = turned.most_common(1)
    assert leader in flaky
    steady = sum(count for device, count in turned.items() if device not in flaky)
    assert sum(turned[d] for d in flaky) > steady
    again, _ = flaps_per_device(root / "b", seed=11, steps=1)
    assert again == flaky


def test_flaky_counts_are_checked(root: Path) -> None:
    specs = [PluginSpec(GPU, 2, "gpu")]
    for flaky in ({GPU: 3}, {"example.com/dongle": 1}):
        with pytest.raises(ValueError, match="flaky"):
            SimNode(root, specs, workload_seed=1, flaky=flaky)


def test_the_demo_makes_gpus_flaky_and_leaves_dongles_alone() -> None:
    parser = build_parser()
    flaky = {}
    for node in TOPOLOGY:
        args: argparse.Namespace = parser.parse_args(sim_node_args(node, "/tmp/r", "/tmp/k"))
        flaky[node.name] = dict(args.flaky)
    assert flaky == {"gpu-a": {GPU: 2}, "dongle-b": {}, "mixed-c": {GPU: 1}}
