"""`devicedeck agent` refuses bad arguments with exit code 2 and names the argument."""

from __future__ import annotations

import subprocess

import pytest

from .helpers import DEVICEDECK, base_env


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["--node", "Not_A_Node", "--server", "http://127.0.0.1:1"], "--node"),
        (["--node", "n", "--server", "ftp://example"], "--server"),
        (["--node", "n", "--server", "http://127.0.0.1:1", "--tap", "gpu"], "--tap"),
        (["--node", "n", "--server", "http://127.0.0.1:1", "--interval", "0.1"], "--interval"),
    ],
)
def test_bad_arguments_are_refused_by_name(arguments: list[str], named: str) -> None:
    done = subprocess.run(
        [DEVICEDECK, "agent", *arguments],
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert f'reason="{named}' in done.stderr or f"reason='{named}" in done.stderr, done.stderr
