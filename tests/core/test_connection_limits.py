"""Limits below the app, as `devicedeck serve` runs it: a request's headers have a deadline, and
one client address may hold only so many connections, so neither can starve the probes.

Each test runs the real command and speaks to it over raw sockets: what matters happens before
a request reaches the app.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from ui.servers import served_processes, wait_until

PATIENCE = 30.0


@pytest.fixture
def database_env(sqlite_template: Path, tmp_path: Path) -> dict[str, str]:
    target = tmp_path / "devicedeck.db"
    shutil.copy(sqlite_template, target)
    return {"DEVICEDECK_DATABASE_URL": f"sqlite:///{target}"}


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(PATIENCE)
    # Every 127.x.y.z is this machine: a second source address is a second client.
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def answer_and_close(sock: socket.socket) -> bytes:
    """All the server sends until it closes the connection; fails after PATIENCE."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


@pytest.fixture
def serve() -> Iterator[ExitStack]:
    """What the test starts, stopped after it."""
    with ExitStack() as stack:
        yield stack


def start(stack: ExitStack, env: dict[str, str], tmp_path: Path, **settings: str) -> int:
    extra = {f"DEVICEDECK_{name.upper()}": value for name, value in settings.items()}
    (served,) = stack.enter_context(served_processes([{**env, **extra}], tmp_path))
    return served.port


def test_headers_that_never_finish_are_answered_408_and_closed(
    serve: ExitStack, database_env: dict[str, str], tmp_path: Path
) -> None:
    port = start(serve, database_env, tmp_path, header_read_timeout="1")
    with connect(port) as sock:
        sock.sendall(b"GET /livez HTTP/1.1\r\nHost: devicedeck.test\r\nX-Slow: ")
        received = answer_and_close(sock)
    assert received.startswith(b"HTTP/1.1 408 "), received
    assert b"connection: close" in received.lower()
    # A connection that never begins a request is closed, with nothing said.
    with connect(port) as idle:
        assert answer_and_close(idle) == b""
    # A request whose headers arrive in time is answered as ever.
    assert httpx.get(f"http://127.0.0.1:{port}/livez", timeout=PATIENCE).status_code == 200


def test_a_client_over_its_connection_cap_is_refused_while_others_are_answered(
    serve: ExitStack, database_env: dict[str, str], tmp_path: Path
) -> None:
    port = start(
        serve, database_env, tmp_path, max_connections_per_client="5", header_read_timeout="600"
    )
    with ExitStack() as held:
        for _ in range(5):
            sock = held.enter_context(connect(port))
            sock.sendall(b"GET /livez HTTP/1.1\r\n")  # and no more
        with connect(port) as one_too_many:
            received = answer_and_close(one_too_many)
        assert received.startswith(b"HTTP/1.1 429 "), received
        assert b"retry-after: 1" in received.lower()
        # Another address has connections of its own: the probe answers.
        with connect(port, source="127.0.0.2") as other:
            other.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert answer_and_close(other).startswith(b"HTTP/1.1 200 ")
    # The held connections are closed: the first address is answered again.
    wait_until(lambda: answers(port), what="the first address to be answered again")


def answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/livez", timeout=PATIENCE).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_connection_limit_defaults() -> None:
    from devicedeck.config import Settings

    assert Settings().header_read_timeout == 10
    assert Settings().max_connections_per_client == 256
