"""Shared by the deployment tests: the repository, the CLI parser, waiting."""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from devicedeck.cli import build_parser

REPO = Path(__file__).resolve().parents[2]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """Every `devicedeck` subcommand and its parser."""
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("the devicedeck parser has no subcommands")


def parse_command(argv: Sequence[str]) -> argparse.Namespace:
    """Parse a `devicedeck` command line as the CLI would, failing the test on bad flags."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            return build_parser().parse_args(list(argv))
    except SystemExit as e:
        raise AssertionError(
            f"`devicedeck {' '.join(argv)}` does not parse: {errors.getvalue()}"
        ) from e


def help_succeeds(command: str) -> str:
    """`devicedeck COMMAND --help` must print help and exit 0; the help text."""
    out = io.StringIO()
    code: object = "no exit"
    with contextlib.redirect_stdout(out):
        try:
            build_parser().parse_args([command, "--help"])
        except SystemExit as e:
            code = e.code
    assert code in (0, None), f"`devicedeck {command} --help` exited {code}"
    assert "usage:" in out.getvalue()
    return out.getvalue()


def wait_until(
    predicate: Callable[[], object], timeout: float = 60.0, message: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(0.1)


def wait_for_dashboard(demo: subprocess.Popen[bytes], log: Path, url: str, timeout: float) -> None:
    """Until `devicedeck demo` prints the dashboard URL; fails with its output if it exits."""
    banner = f"Dashboard: {url}/"
    wait_until(
        lambda: banner in log.read_text() or demo.poll() is not None, timeout, "the dashboard URL"
    )
    assert demo.poll() is None, log.read_text()
