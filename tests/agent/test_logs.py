"""The agent's logs with --log-format json: one JSON object a line, each field a key, and the
token it sends never among them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .conftest import RunningService
from .helpers import DONGLE, GPU, Process, SimNode, wait_until

PLUGINS = [f"{GPU}:2", f"{DONGLE}:1"]
REFUSED_TOKEN = "ddk_refused-by-the-service-0123456789abcdef"


def entries(agent: Process) -> list[dict[str, Any]]:
    """Every line the agent has written so far, each parsed as one JSON object."""
    found = []
    for line in agent.output().splitlines():
        if line.strip():
            entry = json.loads(line)
            assert isinstance(entry, dict) and {"time", "level", "logger", "message"} <= set(entry)
            found.append(entry)
    return found


def test_json_logs_carry_each_field_as_a_key(
    shared_service: RunningService,
    work_dir: Path,
    sim_node: Callable[..., SimNode],
    start_agent: Callable[..., Process],
) -> None:
    node = sim_node(PLUGINS)
    token_file = work_dir / "token"
    token_file.write_text(REFUSED_TOKEN + "\n")
    agent = start_agent(
        shared_service.url,
        "",
        node.root,
        *("--log-format", "json", "--auth-retry", "600", "--interval", "2"),
        token_file=token_file,
    )

    def refused() -> list[dict[str, Any]]:
        return [e for e in entries(agent) if e.get("event") == "unauthorized"]

    [unauthorized] = wait_until(refused, message="the refused token logged")
    assert unauthorized["status"] == 401 and unauthorized["level"] == "error"
    assert unauthorized["logger"] == "devicedeck.agent.pusher" and unauthorized["detail"]
    [starting] = [e for e in entries(agent) if e.get("event") == "agent_starting"]
    assert starting["node"] and starting["server"] == shared_service.url

    # With a good token the agent recovers and says so, as a field, not inside a message.
    replacement = work_dir / "token.new"
    replacement.write_text(shared_service.ingest_token + "\n")
    replacement.rename(token_file)
    wait_until(
        lambda: any(e.get("event") == "service_reachable" for e in entries(agent)),
        message="the service reachable again",
    )
    output = agent.output()
    assert REFUSED_TOKEN not in output and shared_service.ingest_token not in output
