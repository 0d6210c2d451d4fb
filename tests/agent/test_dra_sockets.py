"""Which DRA driver sockets the agent streams from, and the entries it posts for a message."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.agent.dra_health import MESSAGE_LIMIT, device_entries, find_dra_sockets
from app.kubelet.proto import drahealth_pb2


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
