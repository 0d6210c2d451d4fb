"""Shared by the monitoring tests: promtool, and the Grafana dashboard's queries."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from .manifests import MONITORING, Obj

DASHBOARD = MONITORING / "grafana-dashboard.json"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    return path


def run_promtool(*args: str, cwd: Path) -> str:
    result = subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"promtool {' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result.stdout


def dashboard() -> Obj:
    board: Obj = json.loads(DASHBOARD.read_text())
    return board


def dashboard_queries() -> dict[str, list[str]]:
    """Each panel's title and its queries."""
    panels = [panel for panel in dashboard()["panels"] if panel["type"] != "row"]
    queries = {panel["title"]: [target["expr"] for target in panel["targets"]] for panel in panels}
    assert len(queries) == len(panels), "two panels have one title"
    return queries


def as_prometheus_query(expr: str) -> str:
    """A dashboard query as Prometheus gets it, with Grafana's variables filled in."""
    return (
        expr.replace("$__rate_interval", "2m")
        .replace('"$node"', '".*"')
        .replace('"$resource"', '".*"')
    )
