"""deploy/monitoring/grafana-dashboard.json: valid queries that count each device once
(every service replica reports the same gauges), and the panels an operator looks for."""

from __future__ import annotations

from pathlib import Path

import yaml

from .manifests import MONITORING
from .monitoring import DASHBOARD, as_prometheus_query, dashboard, dashboard_queries, run_promtool


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    rules = [
        {"record": f"devicedeck:dashboard_query_{i}", "expr": as_prometheus_query(expr)}
        for i, expr in enumerate(e for exprs in dashboard_queries().values() for e in exprs)
    ]
    assert rules
    path = tmp_path / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    run_promtool("check", "rules", path.name, cwd=tmp_path)


def test_dashboard_shows_health_and_allocation_per_resource_and_node_and_unhealthy_devices() -> (
    None
):
    board = dashboard()
    assert board["uid"] == "devicedeck"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    assert {"node", "resource"} <= set(variables)
    panels = {p["title"]: p for p in board["panels"] if p["type"] != "row"}
    queries = dashboard_queries()

    def over_time(metric: str, grouping: str) -> bool:
        return any(
            panels[title]["type"] == "timeseries"
            and any(metric + "{" in e and f"sum by ({grouping})" in e for e in exprs)
            for title, exprs in queries.items()
        )

    assert over_time("devicedeck_node_devices", "resource, health")
    assert over_time("devicedeck_node_devices", "node, resource, health")
    assert over_time("devicedeck_node_devices_allocated", "resource")
    assert over_time("devicedeck_node_devices_allocated", "node, resource")
    table = panels["Unhealthy devices and their holders"]
    assert table["type"] == "table"
    (target,) = table["targets"]
    assert target["format"] == "table" and target["instant"] is True
    assert "devicedeck_device_healthy" in target["expr"] and target["expr"].endswith("== 0")
    shown = table["transformations"][0]["options"]["renameByName"]
    assert {"node", "resource", "device", "namespace", "pod"} <= set(shown)
    # Every query follows the dashboard's node and resource choices where it can.
    for title, exprs in queries.items():
        for expr in exprs:
            if "devicedeck_node_devices" in expr:
                assert 'node=~"$node"' in expr and 'resource=~"$resource"' in expr, title


def test_monitoring_component_ships_the_dashboard_file_for_grafanas_sidecar() -> None:
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    (generator,) = kustomization["configMapGenerator"]
    assert generator["files"] == [f"devicedeck.json={DASHBOARD.name}"]
    assert generator["options"]["labels"]["grafana_dashboard"] == "1"
    assert generator["options"]["disableNameSuffixHash"] is True


# Two replicas (instances a and b) report the same fleet: n1 has 3 healthy GPUs and one
# unhealthy one (GPU-3, held by ml/train), n2 4 healthy GPUs and 2 FPGAs, n3 stopped reporting
# at time 0. Each number on the board must count every device once.
FLEET = [
    ('devicedeck_node_devices{node="n1",resource="nvidia.com/gpu",health="Healthy"}', 3),
    ('devicedeck_node_devices{node="n1",resource="nvidia.com/gpu",health="Unhealthy"}', 1),
    ('devicedeck_node_devices{node="n2",resource="nvidia.com/gpu",health="Healthy"}', 4),
    ('devicedeck_node_devices{node="n2",resource="example.com/fpga",health="Healthy"}', 2),
    ('devicedeck_node_devices{node="n3",resource="nvidia.com/gpu",health="Unknown"}', 8),
    ('devicedeck_node_devices_allocated{node="n1",resource="nvidia.com/gpu"}', 2),
    ('devicedeck_node_devices_allocated{node="n2",resource="nvidia.com/gpu"}', 1),
    ('devicedeck_node_stale{node="n1"}', 0),
    ('devicedeck_node_stale{node="n2"}', 0),
    ('devicedeck_node_stale{node="n3"}', 1),
    ('devicedeck_node_last_seen_timestamp_seconds{node="n3"}', 0),
    (
        'devicedeck_device_healthy{node="n1",resource="nvidia.com/gpu",device="GPU-3",'
        'namespace="ml",pod="train"}',
        0,
    ),
    (
        'devicedeck_device_healthy{node="n1",resource="nvidia.com/gpu",device="GPU-0",'
        'namespace="",pod=""}',
        1,
    ),
]
GPU = "nvidia.com/gpu"
# (panel title, query index) -> the samples it must give at 10 minutes, label sets as
# promtool writes them.
EXPECTED: dict[tuple[str, int], list[tuple[str, float]]] = {
    ("Devices", 0): [("{}", 18)],
    ("Unhealthy devices", 0): [("{}", 1)],
    ("Allocated devices", 0): [("{}", 3)],
    ("Stale nodes", 0): [("{}", 1)],
    ("Devices by health, per resource", 0): [
        (f'{{resource="{GPU}", health="Healthy"}}', 7),
        (f'{{resource="{GPU}", health="Unhealthy"}}', 1),
        (f'{{resource="{GPU}", health="Unknown"}}', 8),
        ('{resource="example.com/fpga", health="Healthy"}', 2),
    ],
    ("Allocated devices, per resource", 0): [(f'{{resource="{GPU}"}}', 3)],
    ("Devices not healthy, per node", 0): [
        (f'{{node="n1", resource="{GPU}", health="Unhealthy"}}', 1),
        (f'{{node="n3", resource="{GPU}", health="Unknown"}}', 8),
    ],
    ("Allocated devices, per node", 0): [
        (f'{{node="n1", resource="{GPU}"}}', 2),
        (f'{{node="n2", resource="{GPU}"}}', 1),
    ],
    ("Unhealthy devices and their holders", 0): [
        (f'{{node="n1", resource="{GPU}", device="GPU-3", namespace="ml", pod="train"}}', 0),
    ],
    ("Nodes that stopped reporting", 0): [('{node="n3"}', 600)],
}


def test_dashboard_counts_each_device_once_with_two_replicas(tmp_path: Path) -> None:
    queries = dashboard_queries()
    series = [
        {"series": name.replace("{", f'{{instance="{replica}",', 1), "values": f"{value}x10"}
        for name, value in FLEET
        for replica in ("a", "b")
    ]
    cases = []
    for (title, index), samples in EXPECTED.items():
        cases.append(
            {
                "expr": as_prometheus_query(queries[title][index]),
                "eval_time": "10m",
                "exp_samples": [{"labels": labels, "value": value} for labels, value in samples],
            }
        )
    tests = {
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": cases}],
    }
    (tmp_path / "board-test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    run_promtool("test", "rules", "board-test.yaml", cwd=tmp_path)


def test_panels_fit_the_grid_without_overlapping() -> None:
    """Grafana's grid is 24 columns wide; overlapping panels are pushed around on load."""
    taken: set[tuple[int, int]] = set()
    for panel in dashboard()["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
    ids = [panel["id"] for panel in dashboard()["panels"]]
    assert len(ids) == len(set(ids))
