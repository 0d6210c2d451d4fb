"""`devicedeck agent`: bad arguments are refused with exit code 2 naming the argument; the token
comes from --token-file or, without it, from DEVICEDECK_TOKEN, as its help says."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import RunningService
from .helpers import DEVICEDECK, DONGLE, Api, Process, SimNode, base_env, counts, wait_until


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["--node", "Not_A_Node", "--server", "http://127.0.0.1:1"], "--node"),
        (["--node", "n", "--server", "ftp://example"], "--server"),
        (["--node", "n", "--server", "http://127.0.0.1:1", "--tap", "gpu"], "--tap"),
        (["--node", "n", "--server", "http://127.0.0.1:1", "--interval", "0.1"], "--interval"),
        (
            ["--node", "n", "--server", "http://127.0.0.1:1", "--dra-plugins-dir", "/tmp"],
            "--dra-plugins-dir",
        ),
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


def test_help_says_where_the_token_comes_from() -> None:
    done = subprocess.run(
        [DEVICEDECK, "agent", "--help"], env=base_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    # DEVICEDECK_TOKEN holds the token itself, never the name of a file.
    assert "default: $DEVICEDECK_TOKEN" not in text
    assert "the token itself is taken from the DEVICEDECK_TOKEN environment variable" in text


@pytest.mark.slow
def test_token_from_the_environment_without_a_token_file(
    shared_service: RunningService,
    sim_node: Callable[..., SimNode],
    api_for: Callable[[RunningService], Api],
    node_name: str,
    work_dir: Path,
) -> None:
    node = sim_node([f"{DONGLE}:2"])
    argv = [DEVICEDECK, "agent", "--node", node_name, "--server", shared_service.url]
    argv += ["--kubelet-root", str(node.root), "--interval", "2"]
    env = base_env(DEVICEDECK_TOKEN=shared_service.ingest_token)
    agent = Process("agent-token-from-env", argv, work_dir, env)
    agent.start()
    try:
        api = api_for(shared_service)
        wait_until(lambda: counts(api, node_name) == (2, 0), message="devices posted")
        assert "event=no_token" not in agent.output()
    finally:
        assert agent.stop() == 0, agent.output()
