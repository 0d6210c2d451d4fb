"""What a user of the demo watches besides the dashboard: the logs (every line in the chosen
format), the webhook receiver's log, the agents' and the service's metrics, and an outage of
one node told by a firing and then a resolved DevicedeckNodeStale message."""

from __future__ import annotations

import json
import os
import re
import signal
import urllib.request
from pathlib import Path
from typing import Any

from devicedeck.demo.banner import OUTAGE_NODE, outage_pattern

from .helpers import wait_until

RFC3339_MS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
TEXT_LINE = re.compile(rf"time={RFC3339_MS} level=[A-Z]+ logger=\S+ .* event=[a-z0-9_]+( |$)")
TEXT_ALERT = re.compile(r" status=(\w+) alertname=(\w+) node=(\S+)")
# Deadline for an outcome, not a speed: the node is stale within 20 s on an idle machine.
OUTAGE_TIMEOUT = 120.0


def log_line_problems(logs_dir: Path, log_format: str) -> list[str]:
    """Lines of the demo's log files that are not whole log lines of the format, with an
    RFC 3339 time and an event."""
    problems = []
    for path in sorted(logs_dir.glob("*.log")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            if log_format == "json":
                try:
                    entry = json.loads(line)
                    good = bool(re.fullmatch(RFC3339_MS, entry["time"]) and entry["event"])
                except (ValueError, KeyError, TypeError):
                    good = False
            else:
                good = bool(TEXT_LINE.match(line))
            if not good:
                problems.append(f"{path.name}:{number}: {line[:300]}")
    return problems


def received_alerts(webhook_log: Path) -> list[tuple[str, str, str]]:
    """(status, alertname, node) of every alert the demo's receiver logged, in order."""
    found = []
    for line in webhook_log.read_text().splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("event") == "webhook_received":
                found.append((entry["status"], entry["alertname"], entry["node"]))
        elif "event=webhook_received" in line and (match := TEXT_ALERT.search(line)):
            status, alertname, node = match.groups()
            found.append((status, alertname, node))
    return found


def stale_alerts(webhook_log: Path, node: str) -> list[str]:
    return [
        s
        for s, name, n in received_alerts(webhook_log)
        if (name, n) == ("DevicedeckNodeStale", node)
    ]


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def stop_an_agent_then_continue_it(
    port: int, agent_pid: int, server: str, data_dir: Path
) -> dict[str, Any]:
    """The README's outage: SIGSTOP the agent (what `pkill -STOP -f PATTERN` does), wait for
    the node to turn stale and the firing message, SIGCONT it, wait for the resolved one."""
    from .test_demo import node_stale

    node = OUTAGE_NODE
    webhook_log = data_dir / "logs" / "webhooks.log"
    # The pattern the README and the banner give matches this agent's command line.
    assert re.search(outage_pattern(server), cmdline(agent_pid)), cmdline(agent_pid)
    wait_until(lambda: not node_stale(port, node), OUTAGE_TIMEOUT, f"{node} fresh first")
    before = len(stale_alerts(webhook_log, node))
    os.kill(agent_pid, signal.SIGSTOP)
    try:
        wait_until(
            lambda: node_stale(port, node), OUTAGE_TIMEOUT, f"{node} stale, its agent stopped"
        )
        wait_until(
            lambda: stale_alerts(webhook_log, node)[before:] == ["firing"],
            OUTAGE_TIMEOUT,
            f"DevicedeckNodeStale firing for {node} in the receiver's log",
        )
    finally:
        os.kill(agent_pid, signal.SIGCONT)
    wait_until(
        lambda: stale_alerts(webhook_log, node)[before:] == ["firing", "resolved"],
        OUTAGE_TIMEOUT,
        f"DevicedeckNodeStale resolved for {node} once its agent went on",
    )
    return {"node": node, "alerts": stale_alerts(webhook_log, node)[before:]}


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def printed_agent_metrics(output: str) -> dict[str, str]:
    """node -> the agent's /metrics URL, as the demo printed them."""
    (line,) = [line for line in output.splitlines() if line.strip().startswith("Metrics:")]
    return dict(re.findall(r"(\S+) (http://\S+/metrics)", line.partition("agents ")[2]))
