"""Child processes of the demo: started in their own process groups, restarted when they
die, stopped in order.

Each child leads its own process group, so a Ctrl-C in the terminal reaches only the demo,
which then stops the children in a sensible order (agents, then nodes, then the service)
and waits for each; anything still running after the grace period is killed with its whole
group. On Linux each child also gets SIGTERM if the demo itself dies, so no orphan keeps a
port or a socket busy.

A child that exits is started again after a back-off (its own first delay, doubling up to
RESTART_CAP_SECONDS), with the same command, its log continued. A child that then runs for
HEALTHY_AFTER_SECONDS starts from its first delay again the next time it dies.
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

from devicedeck.config import LogFormat
from devicedeck.logs import formatted_line
from devicedeck.retry import NO_JITTER, Backoff

STOP_GRACE_SECONDS = 10.0
PR_SET_PDEATHSIG = 1
RESTART_CAP_SECONDS = 60.0
HEALTHY_AFTER_SECONDS = 60.0


def devicedeck_argv(args: Sequence[str]) -> list[str]:
    """The command line running `devicedeck ARGS` with this very interpreter."""
    return [sys.executable, "-m", "devicedeck.cli", *args]


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
    env: dict[str, str]
    backoff: Backoff
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    started_at: float = 0.0
    # When a child that died is due to start again; None while it runs.
    restart_at: float | None = None
    restarts: int = 0

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def exit_description(self) -> str:
        code = self.process.returncode if self.process is not None else None
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"


class Children:
    """Starts children, restarts those that die, and stops them all, tier by tier (highest
    first)."""

    def __init__(self, env: Mapping[str, str], cwd: Path, log_format: str = "text") -> None:
        self._env = dict(env)
        self._cwd = cwd
        self._log_format = LogFormat(log_format)
        self.started: list[Child] = []
        self._preexec = _die_with_parent()

    def start(
        self,
        name: str,
        args: Sequence[str],
        log_path: Path,
        tier: int,
        env: Mapping[str, str] | None = None,
        restart_delay: float = 1.0,
    ) -> Child:
        """Starts a child; should it die, it waits restart_delay seconds (then twice that,
        and so on) before it is started again."""
        backoff = Backoff(restart_delay, max(restart_delay, RESTART_CAP_SECONDS), jitter=NO_JITTER)
        child = Child(
            name, devicedeck_argv(args), log_path, tier, {**self._env, **(env or {})}, backoff
        )
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._spawn(child, "wb")
        self.started.append(child)
        return child

    def _spawn(self, child: Child, mode: str) -> None:
        with child.log_path.open(mode) as log:
            child.process = subprocess.Popen(
                child.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child.env,
                cwd=self._cwd,
                process_group=0,
                preexec_fn=self._preexec,
            )
        child.started_at = time.monotonic()

    def supervise(self, report: Callable[[str], None]) -> None:
        """Notices children that died, and starts those whose back-off is over; `report`
        gets a message for each."""
        now = time.monotonic()
        for child in self.started:
            if child.running:
                if now - child.started_at >= HEALTHY_AFTER_SECONDS:
                    child.backoff.reset()
            elif child.restart_at is None:
                delay = child.backoff.next_delay()
                child.restart_at = now + delay
                report(
                    f"{child.name} stopped unexpectedly ({child.exit_description()}) after "
                    f"{now - child.started_at:.0f} s; starting it again in {delay:g} s. "
                    f"The end of {child.log_path}:\n{child.log_tail(5)}"
                )
            elif now >= child.restart_at:
                child.restart_at = None
                child.restarts += 1
                # In the log's own format, so every line of it reads the same way.
                line = formatted_line(
                    self._log_format,
                    "devicedeck.demo",
                    "started again by the demo",
                    event="restarted",
                    process=child.name,
                    restart=child.restarts,
                )
                with child.log_path.open("ab") as log:
                    log.write(f"{line}\n".encode())
                self._spawn(child, "ab")
                assert child.process is not None
                report(f"{child.name} started again (pid {child.process.pid})")

    def stop_all(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGINT each tier's children, wait for them, kill what lingers after `grace`.
        A child waiting to be started again is not started."""
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
