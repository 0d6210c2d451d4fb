"""sim-ctl against a running simulated node: output, exit codes, device changes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devicedeck.sim import ctl
from devicedeck.sim.commands import main
from devicedeck.sim.kubelet import SimKubelet
from devicedeck.sim.node import PluginSpec, SimNode

from .helpers import RecordingPlugin, wait_until

DONGLE = "example.com/dongle"


@pytest.fixture
def node(root: Path) -> Iterator[SimNode]:
    with SimNode(root, [PluginSpec(DONGLE, 2)]) as running:
        wait_until(lambda: running.kubelet.manager.allocatable() == {DONGLE: 2})
        yield running


def sim_ctl(root: Path, *args: str) -> int:
    return main(["sim-ctl", "--root", str(root), *args])


def test_pod_create_list_delete(
    root: Path, node: SimNode, capsys: pytest.CaptureFixture[str]
) -> None:
    assert sim_ctl(root, "pod", "create", "default/a", "--request", f"{DONGLE}=1") == ctl.EXIT_OK
    assert "pod default/a admitted" in capsys.readouterr().out

    assert sim_ctl(root, "pod", "list") == ctl.EXIT_OK
    listed = capsys.readouterr().out
    assert "default/a" in listed and "dongle-0" in listed

    assert sim_ctl(root, "pod", "delete", "default/a") == ctl.EXIT_OK
    assert node.kubelet.pods.active() == []


def test_refused_requests_exit_non_zero_with_reason(
    root: Path, node: SimNode, capsys: pytest.CaptureFixture[str]
) -> None:
    code = sim_ctl(root, "pod", "create", "default/big", "--request", f"{DONGLE}=5")
    assert code == ctl.EXIT_REFUSED
    assert "not enough free healthy example.com/dongle devices" in capsys.readouterr().err

    assert sim_ctl(root, "pod", "delete", "default/ghost") == ctl.EXIT_REFUSED
    assert "not found" in capsys.readouterr().err

    assert sim_ctl(root, "pod", "create", "no-namespace") == ctl.EXIT_USAGE
    assert "NAMESPACE/NAME" in capsys.readouterr().err

    assert sim_ctl(root, "pod", "create", "default/x", "--request", "bad") == ctl.EXIT_USAGE

    assert sim_ctl(root, "device", "health", DONGLE, "nope", "Unhealthy") == ctl.EXIT_REFUSED
    assert "unknown device" in capsys.readouterr().err


def test_device_commands_reach_in_process_plugins(
    root: Path, node: SimNode, capsys: pytest.CaptureFixture[str]
) -> None:
    manager = node.kubelet.manager

    assert sim_ctl(root, "device", "health", DONGLE, "dongle-0", "Unhealthy") == ctl.EXIT_OK
    wait_until(lambda: manager.allocatable() == {DONGLE: 1})

    assert sim_ctl(root, "device", "unplug", DONGLE, "dongle-1") == ctl.EXIT_OK
    wait_until(lambda: manager.capacity() == {DONGLE: 1})

    assert sim_ctl(root, "device", "plug", DONGLE, "dongle-1") == ctl.EXIT_OK
    wait_until(lambda: manager.capacity() == {DONGLE: 2})

    assert sim_ctl(root, "device", "health", DONGLE, "#0", "Healthy") == ctl.EXIT_OK
    wait_until(lambda: manager.allocatable() == {DONGLE: 2})

    assert sim_ctl(root, "--json", "node", "status") == ctl.EXIT_OK
    assert '"capacity": 2' in capsys.readouterr().out


def test_device_commands_for_a_separate_plugin_say_it_is_not_reachable(
    root: Path,
    start_kubelet: Callable[..., SimKubelet],
    start_plugin: Callable[..., RecordingPlugin],
    capsys: pytest.CaptureFixture[str],
) -> None:
    start_kubelet()
    start_plugin(DONGLE, 1)

    assert sim_ctl(root, "device", "unplug", DONGLE, "d0") == ctl.EXIT_REFUSED
    assert "separate process" in capsys.readouterr().err

    assert sim_ctl(root, "device", "plug", "example.com/none", "x") == ctl.EXIT_REFUSED
    assert "no device plugin" in capsys.readouterr().err


def test_no_kubelet_running(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_ctl(root, "pod", "list") == ctl.EXIT_UNAVAILABLE
    assert "no simulated kubelet answers" in capsys.readouterr().err


def test_plugin_status_shows_the_plugins_own_devices(
    root: Path, node: SimNode, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the plugin itself has, the truth an outside checker compares the service with."""
    assert sim_ctl(root, "device", "health", DONGLE, "dongle-0", "Unhealthy") == ctl.EXIT_OK
    assert sim_ctl(root, "device", "unplug", DONGLE, "dongle-1") == ctl.EXIT_OK
    capsys.readouterr()

    assert sim_ctl(root, "--json", "plugin", "status") == ctl.EXIT_OK
    result = json.loads(capsys.readouterr().out)
    assert result == {"plugins": {DONGLE: {"devices": [{"id": "dongle-0", "health": "Unhealthy"}]}}}

    assert sim_ctl(root, "plugin", "status") == ctl.EXIT_OK
    assert "dongle-0 Unhealthy" in capsys.readouterr().out
