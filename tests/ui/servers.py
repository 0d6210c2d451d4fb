"""Real HTTP servers for the tests that need one: in a thread, or as `devicedeck serve`.

Starlette's TestClient runs a response to completion before returning it, so an endless event
stream needs a real server. Both helpers stop what they started, whatever the test did.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx
import uvicorn
from agent.helpers import free_port, listens_on
from fastapi import FastAPI

from devicedeck.config import Settings
from devicedeck.main import create_app

ROOT = Path(__file__).resolve().parents[2]


def wait_until(condition: Callable[[], bool], timeout: float = 60.0, what: str = "it") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url + "/livez", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def threaded_server(settings: Settings) -> Iterator[tuple[str, FastAPI]]:
    """The app under uvicorn in a thread; yields (base URL, app)."""
    app = create_app(settings)
    # Bound here and handed over, so no other test process can take the port before the
    # server listens on it.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    port: int = listener.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", ws="none", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [listener]}, name=f"uvicorn-{port}", daemon=True
    )
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: server.started, what="the server to start")
        yield url, app
    finally:
        # A server in a thread gets no signals, so end the event streams the way the signal
        # hook would; then uvicorn's shutdown does not wait on them.
        hub = getattr(app.state, "live", None)
        if hub is not None and server.started:
            hub.close_threadsafe()
        server.should_exit = True
        thread.join(timeout=20)
        listener.close()
        assert not thread.is_alive(), "the server thread did not stop"


class ServedProcess:
    """`devicedeck serve` in its own process, started at once and waited for separately, so
    several can start side by side."""

    def __init__(
        self, settings_env: dict[str, str], log_dir: Path, args: Sequence[str] = ()
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"serve-{self.port}.log"
        env = {**os.environ, **settings_env, "PYTHONUNBUFFERED": "1"}
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "devicedeck.cli",
                    "serve",
                    "--no-migrate",
                    "--port",
                    str(self.port),
                    *args,
                ],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        # Whoever else took the port meanwhile answers too; only this process's socket counts.
        while not (listens_on(self.process.pid, self.port) and _answers(self.url)):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"server did not start:\n{self.log_path.read_text()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def served_processes(
    envs: list[dict[str, str]], log_dir: Path, args: Sequence[Sequence[str]] = ()
) -> Iterator[list[ServedProcess]]:
    """One process per env; args, when given, holds each one's extra `serve` arguments."""
    started: list[ServedProcess] = []
    try:
        for index, env in enumerate(envs):
            started.append(ServedProcess(env, log_dir, args[index] if args else ()))
        for served in started:
            served.wait_ready()
        yield started
    finally:
        for served in started:
            served.stop()
