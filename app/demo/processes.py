"""Child processes of the demo: started in their own process groups, stopped in order.

Each child leads its own process group, so a Ctrl-C in the terminal reaches only the demo,
which then stops the children in a sensible order (agents, then nodes, then the service)
and waits for each; anything still running after the grace period is killed with its whole
group. On Linux each child also gets SIGTERM if the demo itself dies, so no orphan keeps a
port or a socket busy.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

STOP_GRACE_SECONDS = 10.0
PR_SET_PDEATHSIG = 1


def devicedeck_argv(args: Sequence[str]) -> list[str]:
    """The command line running `devicedeck ARGS` with this very interpreter."""
    return [sys.executable, "-m", "app.cli", *args]


def _die_with_parent() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    prctl = libc.prctl

    def set_death_signal() -> None:
        # Runs in the child between fork and exec: only async-signal-safe work here.
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)

    return set_death_signal


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    # Children stop by tier, highest first, all of one tier at once.
    tier: int
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


class Children:
    """Starts children and stops them all, tier by tier (highest first)."""

    def __init__(self, env: Mapping[str, str], cwd: Path) -> None:
        self._env = dict(env)
        self._cwd = cwd
        self.started: list[Child] = []
        self._preexec = _die_with_parent()

    def start(
        self,
        name: str,
        args: Sequence[str],
        log_path: Path,
        tier: int,
        env: Mapping[str, str] | None = None,
    ) -> Child:
        child = Child(name, devicedeck_argv(args), log_path, tier)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("wb") as log:
            child.process = subprocess.Popen(
                child.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**self._env, **(env or {})},
                cwd=self._cwd,
                process_group=0,
                preexec_fn=self._preexec,
            )
        self.started.append(child)
        return child

    def first_exited(self) -> Child | None:
        for child in self.started:
            if not child.running:
                return child
        return None

    def stop_all(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGINT each tier's children, wait for them, kill what lingers after `grace`."""
        for tier in sorted({c.tier for c in self.started}, reverse=True):
            group = [c for c in self.started if c.tier == tier and c.process is not None]
            for child in group:
                if child.running:
                    assert child.process is not None
                    _signal_group(child.process, signal.SIGINT)
            deadline = time.monotonic() + grace
            for child in group:
                _wait_or_kill(child, deadline)
        self.started.clear()


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    # The child leads its own group (process_group=0), so its pid is the group id.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def _wait_or_kill(child: Child, deadline: float) -> None:
    process = child.process
    assert process is not None
    try:
        process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        # Not reaped yet, so the group id is still this child's: killing it is safe.
        _signal_group(process, signal.SIGKILL)
        process.wait()


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
