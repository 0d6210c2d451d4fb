"""Which DRA driver sockets the agent streams from, and the entries it posts for a message."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from devicedeck.agent.dra_health import (
    MESSAGE_LIMIT,
    DraHealthWatch,
    device_entries,
    find_dra_sockets,
)
from devicedeck.agent.metrics import AgentMetrics
from devicedeck.kubelet.paths import dra_plugin_socket, unix_target
from devicedeck.kubelet.proto import drahealth_pb2
from devicedeck.sim.dra_health_server import SimDraHealthServer

from .helpers import wait_until


@pytest.fixture
def bound() -> Iterator[list[socket.socket]]:
    sockets: list[socket.socket] = []
    yield sockets
    for sock in sockets:
        sock.close()


def _bind(path: Path, bound: list[socket.socket], mtime: float | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    bound.append(sock)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def test_one_socket_per_driver_found_where_the_kubelet_plugin_helper_puts_it(
    work_dir: Path, bound: list[socket.socket]
) -> None:
    plugins = work_dir / "plugins"
    _bind(plugins / "gpu.example.com" / "dra.sock", bound)
    # A rolling update: two instances, each with its own socket; the newest serves.
    now = time.time()
    _bind(plugins / "net.example.com" / "dra-uid-old.sock", bound, mtime=now - 60)
    _bind(plugins / "net.example.com" / "dra-uid-new.sock", bound, mtime=now)
    # A CSI driver, a stray file and a directory that cannot be a driver's name.
    _bind(plugins / "csi.example.com" / "csi.sock", bound)
    (plugins / "file.example.com").mkdir()
    (plugins / "file.example.com" / "dra.sock").write_text("not a socket")
    _bind(plugins / "Not_A_Driver" / "dra.sock", bound)

    assert find_dra_sockets(plugins) == {
        "gpu.example.com": plugins / "gpu.example.com" / "dra.sock",
        "net.example.com": plugins / "net.example.com" / "dra-uid-new.sock",
    }
    assert find_dra_sockets(work_dir / "missing") == {}


def test_entries_are_ordered_and_long_messages_cut_as_the_kubelet_cuts_them() -> None:
    def health(pool: str, name: str, status: int, message: str = "") -> drahealth_pb2.DeviceHealth:
        return drahealth_pb2.DeviceHealth(
            device=drahealth_pb2.DeviceIdentifier(pool_name=pool, device_name=name),
            health=status,  # type: ignore[arg-type]
            last_updated_time=1764763200,
            message=message,
        )

    response = drahealth_pb2.NodeWatchResourcesResponse(
        devices=[
            health("node-a", "gpu-1", drahealth_pb2.UNHEALTHY, "x" * 2000),
            health("node-a", "gpu-0", drahealth_pb2.HEALTHY),
            # A health value newer than this proto knows of is reported as UNKNOWN.
            health("node-a", "gpu-2", 7),
        ]
    )
    entries = device_entries(response)
    assert [(e["device"]["deviceName"], e["health"]) for e in entries] == [
        ("gpu-0", "HEALTHY"),
        ("gpu-1", "UNHEALTHY"),
        ("gpu-2", "UNKNOWN"),
    ]
    message = entries[1]["message"]
    assert len(message) == MESSAGE_LIMIT and message.endswith("...")


def test_a_driver_without_the_health_service_is_streamed_once_restarted_with_it(
    work_dir: Path,
) -> None:
    plugins = work_dir / "plugins"
    path = dra_plugin_socket(work_dir, "gpu.example.com")
    path.parent.mkdir(parents=True)
    # A driver serving DRAPlugin only: NodeWatchResources is UNIMPLEMENTED.
    bare = grpc.server(ThreadPoolExecutor(max_workers=2))
    bare.add_insecure_port(unix_target(path))
    bare.start()
    received: list[tuple[str, list[dict[str, Any]]]] = []
    lock = threading.Lock()

    def on_message(driver: str, devices: list[dict[str, Any]]) -> None:
        with lock:
            received.append((driver, devices))

    metrics = AgentMetrics()
    # Back-off far longer than the test may wait: only the new socket can explain a stream.
    watch = DraHealthWatch(
        plugins,
        metrics,
        rescan=0.2,
        max_backoff=600,
        on_message=on_message,
        on_disconnect=lambda driver: None,
    )
    watch.start()
    health: SimDraHealthServer | None = None
    try:
        errors = {"call": "NodeWatchResources", "code": "UNIMPLEMENTED"}
        wait_until(
            lambda: metrics.registry.get_sample_value(
                "devicedeck_agent_kubelet_call_errors_total", errors
            ),
            message="the UNIMPLEMENTED answer",
        )
        bare.stop(0).wait()
        health = SimDraHealthServer(path, "node-a", ["gpu-0"])
        health.start()
        wait_until(lambda: received, message="a message from the restarted driver")
        ((driver, devices),) = received[:1]
        assert driver == "gpu.example.com"
        assert [(d["device"]["deviceName"], d["health"]) for d in devices] == [("gpu-0", "HEALTHY")]
    finally:
        watch.stop()
        bare.stop(0).wait()
        if health is not None:
            health.stop()
