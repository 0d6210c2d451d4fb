"""sim-dra-driver --root: the DRAResourceHealth stream on the driver's plugin socket, over real
gRPC, with health changed through sim-ctl."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from devicedeck.kubelet.paths import dra_plugin_socket, unix_target
from devicedeck.kubelet.proto import drahealth_pb2, drahealth_pb2_grpc
from devicedeck.sim import ctl
from devicedeck.sim.commands import main
from devicedeck.sim.dra_driver import DRIVER

from .helpers import wait_until

NODE = "gpu-a"


@pytest.fixture
def driver(root: Path) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devicedeck.sim.commands",
            "sim-dra-driver",
            "--root",
            str(root),
            "--node",
            NODE,
            "--devices",
            "3",
        ],
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    try:
        wait_until(lambda: dra_plugin_socket(root, DRIVER).is_socket(), message="dra.sock")
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0


def _states(response: drahealth_pb2.NodeWatchResourcesResponse) -> dict[str, Any]:
    return {
        d.device.device_name: (
            d.device.pool_name,
            drahealth_pb2.HealthStatus.Name(d.health),
            d.message,
            d.health_check_timeout_seconds,
        )
        for d in response.devices
    }


def test_every_stream_sees_the_health_sim_ctl_sets(
    root: Path, driver: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    target = unix_target(dra_plugin_socket(root, DRIVER))
    with grpc.insecure_channel(target) as first, grpc.insecure_channel(target) as second:
        streams = [
            drahealth_pb2_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
                drahealth_pb2.NodeWatchResourcesRequest(), timeout=120
            )
            for channel in (first, second)
        ]
        for stream in streams:
            response = next(stream)
            assert _states(response) == {
                "gpu-0": (NODE, "HEALTHY", "", 60),
                "gpu-1": (NODE, "UNHEALTHY", "Xid 79: GPU has fallen off the bus", 60),
                "gpu-2": (NODE, "HEALTHY", "", 60),
            }
            assert all(d.last_updated_time > 0 for d in response.devices)

        args = ["sim-ctl", "--root", str(root), "dra", "health", "gpu-2", "Unhealthy"]
        assert main([*args, "--message", "ECC errors"]) == ctl.EXIT_OK
        assert "gpu-2: UNHEALTHY" in capsys.readouterr().out
        for stream in streams:
            assert _states(next(stream))["gpu-2"] == (NODE, "UNHEALTHY", "ECC errors", 60)

        assert main(["sim-ctl", "--root", str(root), "dra", "health", "gpu-0", "Unknown"]) == 0
        for stream in streams:
            assert _states(next(stream))["gpu-0"][1] == "UNKNOWN"
        for stream in streams:
            stream.cancel()

    refused = main(["sim-ctl", "--root", str(root), "dra", "health", "gpu-9", "Healthy"])
    assert refused == ctl.EXIT_REFUSED
    assert "no device 'gpu-9'" in capsys.readouterr().err
    assert main(["sim-ctl", "--root", str(root), "dra", "status"]) == ctl.EXIT_OK
    status = capsys.readouterr().out
    assert "gpu-2 UNHEALTHY 'ECC errors'" in status and "gpu-0 UNKNOWN" in status


def test_sim_dra_driver_needs_somewhere_to_serve() -> None:
    assert main(["sim-dra-driver", "--node", NODE]) == 2
