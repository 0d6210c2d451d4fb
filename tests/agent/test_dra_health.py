"""A DRA driver's health stream, end to end with real processes: sim-dra-driver serves
DRAResourceHealth on its plugin socket, the agent streams it over gRPC and posts to the
service over HTTP, and the DRA device's health history shows every change, across a restart
of the driver."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devicedeck.kubelet.paths import dra_plugin_socket
from devicedeck.sim.dra_driver import DRIVER

from .conftest import RunningService
from .helpers import DEVICEDECK, DONGLE, Api, Process, SimNode, base_env, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def start_driver(work_dir: Path, node_name: str) -> Iterator[Callable[[Path], Process]]:
    started: list[Process] = []

    def start(root: Path) -> Process:
        argv = [DEVICEDECK, "sim-dra-driver", "--root", str(root), "--node", node_name]
        driver = Process(
            f"sim-dra-driver-{len(started) + 1}", [*argv, "--devices", "3"], work_dir, base_env()
        )
        started.append(driver)
        driver.start()
        wait_until(
            lambda: dra_plugin_socket(root, DRIVER).is_socket(),
            message=f"{DRIVER}'s dra.sock",
        )
        return driver

    yield start
    for driver in started:
        assert driver.stop() in (0, None), driver.output()


def _history(api: Api, pool: str, device: str) -> list[tuple[Any, ...]] | None:
    """(health, source, message) newest first, or None while the service has nothing."""
    page = api.try_get(f"/api/v1/dra/drivers/{DRIVER}/pools/{pool}/devices/{device}")
    if page is None:
        return None
    return [(h["health"], h["source"], h["message"]) for h in page["health_history"]]


def test_driver_health_stream_reaches_the_device_history(
    shared_service: RunningService,
    sim_node: Callable[..., SimNode],
    start_driver: Callable[[Path], Process],
    start_agent: Callable[..., Process],
    api_for: Callable[[RunningService], Api],
    node_name: str,
) -> None:
    node = sim_node([f"{DONGLE}:2"])
    driver = start_driver(node.root)
    api = api_for(shared_service)
    agent = start_agent(
        shared_service.url,
        shared_service.ingest_token,
        node.root,
        "--dra-health",
        "--interval",
        "2",
    )
    source = "kubelet_dra_health"
    broken = ("Unhealthy", source, "Xid 79: GPU has fallen off the bus")
    wait_until(
        lambda: (
            _history(api, node_name, "gpu-1") == [broken]
            and _history(api, node_name, "gpu-0") == [("Healthy", source, None)]
        ),
        message="the stream's first state",
    )
    page = api.get(f"/api/v1/dra/drivers/{DRIVER}/pools/{node_name}/devices/gpu-1")
    assert page["health"]["reported_by"] == node_name
    assert page["health_stream"]["timeout_seconds"] == 60

    # A change in the driver reaches the history.
    node.sim_ctl("dra", "health", "gpu-0", "Unhealthy", "--message", "ECC errors")
    wait_until(
        lambda: (
            (_history(api, node_name, "gpu-0") or [None])[0] == ("Unhealthy", source, "ECC errors")
        ),
        message="gpu-0's change",
    )

    # The driver restarts (its GPUs healthy again but gpu-1): the agent streams again.
    driver.stop()
    start_driver(node.root)
    wait_until(
        lambda: (
            _history(api, node_name, "gpu-0")
            == [
                ("Healthy", source, None),
                ("Unhealthy", source, "ECC errors"),
                ("Healthy", source, None),
            ]
        ),
        message="gpu-0 healthy after the driver's restart",
    )
    assert _history(api, node_name, "gpu-1") == [broken]
    assert agent.alive(), agent.output()
    assert "event=dra_health_connected" in agent.output()
