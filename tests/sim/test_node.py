"""sim-node: plugin specs, the seeded workload, and the command as a real process."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from devicedeck.sim import ctl
from devicedeck.sim.commands import main
from devicedeck.sim.kubelet.control import call, control_socket_path
from devicedeck.sim.node import PluginSpec, SimNode, parse_node_health_event
from devicedeck.sim.workload import WORKLOAD_NAMESPACES

from .helpers import RecordingPlugin, list_pods, wait_until

REPO = Path(__file__).resolve().parents[2]


def test_plugin_spec_parsing() -> None:
    assert PluginSpec.parse("nvidia.com/gpu:8:gpu") == PluginSpec("nvidia.com/gpu", 8, "gpu")
    assert PluginSpec.parse("example.com/dongle:4") == PluginSpec("example.com/dongle", 4)
    for bad in ("example.com/dongle", "dongle:4", "example.com/x:0", "example.com/x:2:tpu"):
        with pytest.raises(ValueError):
            PluginSpec.parse(bad)


def workload_pod_names(root: Path, seed: int, steps: int) -> list[str]:
    specs = [PluginSpec("example.com/dongle", 4), PluginSpec("nvidia.com/gpu", 4, "gpu")]
    # A long interval: the test drives the steps itself.
    with SimNode(root, specs, workload_seed=seed, workload_interval=3600) as node:
        assert node.workload is not None
        # Every device, not only both resources: admission decides on the healthy ones.
        wait_until(
            lambda: (
                node.kubelet.manager.allocatable() == {"example.com/dongle": 4, "nvidia.com/gpu": 4}
            )
        )
        seen: list[str] = []
        for _ in range(steps):
            node.workload.step()
            seen.extend(p.key for p in node.kubelet.pods.active() if p.key not in seen)
        assert node.workload.created >= 1
        return seen


def test_workload_is_reproducible_for_a_seed(root: Path) -> None:
    first = workload_pod_names(root / "a", seed=11, steps=8)
    second = workload_pod_names(root / "b", seed=11, steps=8)
    assert first == second
    assert all(key.split("/")[0] in WORKLOAD_NAMESPACES for key in first)


def test_sim_node_process_runs_a_workload_and_stops_on_sigterm(root: Path) -> None:
    log_path = root / "node.log"
    command = [
        sys.executable,
        "-m",
        "devicedeck.sim.commands",
        "sim-node",
        "--root",
        str(root),
        "--plugin",
        "nvidia.com/gpu:4:gpu",
        "--plugin",
        "example.com/dongle:2",
        "--workload",
        "7",
        "--workload-interval",
        "0.1",
    ]
    with (
        log_path.open("w") as log,
        subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT) as process,
    ):
        try:
            pod_resources = root / "pod-resources" / "kubelet.sock"
            wait_until(pod_resources.exists, message="PodResources socket")

            def workload_pods() -> int:
                pods = list_pods(root).pod_resources
                return sum(1 for p in pods if p.namespace in WORKLOAD_NAMESPACES)

            wait_until(lambda: workload_pods() >= 2, message="workload pods")
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=20)
    assert code == 0, log_path.read_text()[-2000:]
    assert "sim-node stopped" in log_path.read_text()


def test_cli_offers_the_simulator_commands() -> None:
    from devicedeck.cli import build_parser

    parser = build_parser()
    for command in ("sim-kubelet", "sim-node", "sim-ctl"):
        args = parser.parse_args([command, *_minimal_args(command)])
        assert callable(args.func)


def _allocatable(root: Path, resource: str) -> int:
    status = call(control_socket_path(root), {"op": "node.status"})
    resources = status.get("resources", {})
    return int(resources.get(resource, {}).get("allocatable", 0))


def _minimal_args(command: str) -> list[str]:
    if command == "sim-node":
        return ["--root", "/tmp/x", "--plugin", "example.com/dongle:1"]
    if command == "sim-ctl":
        return ["--root", "/tmp/x", "pod", "list"]
    return ["--root", "/tmp/x"]


def test_sim_kubelet_process_serves_a_separate_plugin_and_stops_on_sigint(
    root: Path, start_plugin: Callable[..., RecordingPlugin], capsys: pytest.CaptureFixture[str]
) -> None:
    log_path = root / "kubelet.log"
    command = [sys.executable, "-m", "devicedeck.sim.commands", "sim-kubelet", "--root", str(root)]
    with (
        log_path.open("w") as log,
        subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT) as process,
    ):
        try:
            wait_until(control_socket_path(root).exists, message="control socket")
            start_plugin("example.com/dongle", 2)
            # Registration returns before the kubelet has read the plugin's first device list.
            wait_until(
                lambda: _allocatable(root, "example.com/dongle") == 2,
                message="dongles allocatable",
            )
            assert (
                main(
                    [
                        "sim-ctl",
                        "--root",
                        str(root),
                        "pod",
                        "create",
                        "default/p",
                        "--request",
                        "example.com/dongle=2",
                    ]
                )
                == ctl.EXIT_OK
            )
            code = main(
                ["sim-ctl", "--root", str(root), "device", "unplug", "example.com/dongle", "d0"]
            )
            assert code == ctl.EXIT_REFUSED
            assert "separate process" in capsys.readouterr().err
        finally:
            process.send_signal(signal.SIGINT)
            exit_code = process.wait(timeout=20)
    assert exit_code == 0, log_path.read_text()[-2000:]
    assert not (root / "device-plugins" / "kubelet.sock").exists()


def test_workload_leaves_a_quarter_of_each_resource_for_pods_by_hand(root: Path) -> None:
    """The README's first command asks gpu-a for two of its eight GPUs while the workload runs."""
    specs = [PluginSpec("nvidia.com/gpu", 8, "gpu"), PluginSpec("example.com/dongle", 4)]
    with SimNode(root, specs, workload_seed=11, workload_interval=3600) as node:
        assert node.workload is not None
        manager = node.kubelet.manager
        lowest = {"nvidia.com/gpu": 8, "example.com/dongle": 4}
        wait_until(lambda: manager.allocatable() == lowest)
        for _ in range(60):
            node.workload.step()
            for resource in lowest:
                lowest[resource] = min(
                    lowest[resource], len(manager.free_healthy_devices(resource))
                )
        assert lowest == {"nvidia.com/gpu": 2, "example.com/dongle": 1}
        assert node.workload.created >= 5 and node.workload.held_back >= 1
        pod = call(
            control_socket_path(root),
            {
                "op": "pod.create",
                "namespace": "demo",
                "name": "my-job",
                "containers": [{"name": "main", "requests": {"nvidia.com/gpu": 2}}],
            },
        )
        [container] = pod["containers"]
        assert len(container["devices"]["nvidia.com/gpu"]["device_ids"]) == 2


def test_health_events_run_and_the_workload_leaves_their_devices_alone(root: Path) -> None:
    """The demo's untapped node: devices a health script drives are never flapped by the
    workload, so what the script sets stays set. (Around a scripted plug or unplug the
    workload keeps still altogether: tests/sim/test_workload_quiet.py.)"""
    events = [
        parse_node_health_event("example.com/dongle 0.2 #3 Unhealthy"),
        parse_node_health_event("example.com/dongle 3600 dongle-2 Unhealthy"),
    ]
    specs = [PluginSpec("example.com/dongle", 4)]
    with SimNode(root, specs, workload_seed=22, workload_interval=3600, health_events=events) as (
        node
    ):
        assert node.workload is not None
        manager = node.kubelet.manager

        def health() -> dict[str, str]:
            return {d.id: d.health for d in manager.devices("example.com/dongle")}

        wait_until(lambda: health().get("dongle-3") == "Unhealthy")
        flapped: set[str] = set()
        for _ in range(80):
            node.workload.step()
            now = health()
            assert now["dongle-3"] == "Unhealthy"
            flapped |= {i for i, h in now.items() if h == "Unhealthy"} - {"dongle-3"}
        assert flapped and "dongle-2" not in flapped
    with pytest.raises(ValueError, match="without a plugin"):
        SimNode(root, specs, health_events=[("example.com/other", events[0][1])])
