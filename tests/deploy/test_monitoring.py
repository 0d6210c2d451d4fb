"""deploy/monitoring: the alert rules pass promtool's checks and unit tests, the monitors and
the dashboard query what exists, and docs/metrics.md lists exactly what the code exports."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from devicedeck.agent.metrics import AgentMetrics
from devicedeck.config import Settings
from devicedeck.main import create_app
from devicedeck.rule_file import RULE_FILE, NotARule, rule_file_text, spec_text

from .helpers import REPO
from .manifests import MONITORING, Obj, containers, find, pod_labels, selects
from .monitoring import DASHBOARD, run_promtool

RULES = MONITORING / "prometheus-rule.yaml"
RULES_TEST = MONITORING / "rules-test.yaml"
METRICS_DOC = REPO / "docs" / "metrics.md"
# Fields of the Prometheus Operator's monitoring.coreos.com/v1 types that these files may use
# (from its API types); a misspelt field would be dropped by the API server without a word.
KNOWN_FIELDS = {
    "PrometheusRule.spec": {"groups"},
    "PrometheusRule.group": {"name", "interval", "rules", "limit", "partial_response_strategy"},
    "PrometheusRule.rule": {"alert", "record", "expr", "for", "keep_firing_for", "labels",
                            "annotations"},
    "ServiceMonitor.spec": {"selector", "namespaceSelector", "endpoints", "jobLabel",
                            "targetLabels", "podTargetLabels", "sampleLimit"},
    "PodMonitor.spec": {"selector", "namespaceSelector", "podMetricsEndpoints", "jobLabel",
                        "podTargetLabels", "sampleLimit"},
    "endpoint": {"port", "path", "scheme", "interval", "scrapeTimeout", "honorLabels",
                 "relabelings", "metricRelabelings", "params"},
    "relabeling": {"sourceLabels", "separator", "targetLabel", "regex", "modulus",
                   "replacement", "action"},
}  # fmt: skip
METRIC_NAME = re.compile(r"\b(devicedeck_[a-z_]+|up)\b")


def alert_rules() -> list[Obj]:
    spec = yaml.safe_load(RULES.read_text())["spec"]
    return [rule for group in spec["groups"] for rule in group["rules"]]


# --- the alert rules -----------------------------------------------------------------------


def test_the_rule_file_is_the_prometheus_rules_spec_with_its_comments() -> None:
    assert RULE_FILE.read_text() == rule_file_text(RULES.read_text()), (
        f"{RULE_FILE.relative_to(REPO)} differs from the PrometheusRule: run `make rules`"
    )
    spec = yaml.safe_load(RULES.read_text())["spec"]
    assert yaml.safe_load(RULE_FILE.read_text()) == spec
    assert "# Needs DEVICEDECK_METRICS_PER_DEVICE=true" in RULE_FILE.read_text()


def test_the_rule_file_follows_whatever_the_prometheus_rule_holds() -> None:
    """A group or a rule added to the PrometheusRule reaches the rule file with no change to
    the generator."""
    text = (
        "apiVersion: monitoring.coreos.com/v1\n"
        "kind: PrometheusRule\n"
        "metadata:\n  name: x\n"
        "spec:\n"
        "  groups:\n"
        "    - name: first\n"
        "      rules:\n"
        "        # why this rule\n"
        "        - record: a:sum\n"
        "          expr: |\n"
        "            sum(a)\n"
        "\n"
        "    - name: added\n"
        "      interval: 30s\n"
        "      rules:\n"
        "        - alert: Added\n"
        "          expr: b > 1\n"
        "# a closing remark\n"
    )
    plain = spec_text(text)
    assert yaml.safe_load(plain) == yaml.safe_load(text)["spec"]
    assert "# why this rule" in plain
    with pytest.raises(NotARule):
        spec_text("kind: PrometheusRule\n")
    with pytest.raises(NotARule):
        spec_text("spec:\n  groups: []\nstatus: {}\n")


def test_promtool_accepts_the_rule_file_as_shipped() -> None:
    output = run_promtool("check", "rules", str(RULE_FILE.relative_to(REPO)), cwd=REPO)
    assert f"SUCCESS: {len(alert_rules())} rules found" in output


def test_every_alert_passes_its_unit_tests_with_the_command_the_docs_give() -> None:
    output = run_promtool("test", "rules", "deploy/monitoring/rules-test.yaml", cwd=REPO)
    assert "SUCCESS" in output
    assert "deploy/monitoring/rules-test.yaml" in METRICS_DOC.read_text()


def test_every_alert_has_a_unit_test_that_fires_and_one_that_stays_silent() -> None:
    tests = yaml.safe_load(RULES_TEST.read_text())["tests"]
    cases = [case for test in tests for case in test["alert_rule_test"]]
    for rule in alert_rules():
        mine = [c for c in cases if c["alertname"] == rule["alert"]]
        assert any(c["exp_alerts"] for c in mine), f"{rule['alert']} is never seen firing"
        assert any(not c["exp_alerts"] for c in mine), f"{rule['alert']} is never seen silent"


def test_the_required_alerts_exist_with_a_severity_and_a_summary() -> None:
    rules = {rule["alert"]: rule for rule in alert_rules()}
    assert {
        "DevicedeckDeviceUnhealthy",
        "DevicedeckNodeStale",
        "DevicedeckAgentPushesFailing",
        "DevicedeckAgentDown",
        "DevicedeckClusterWatchForbidden",
        "DevicedeckIngestErrorsRising",
    } <= set(rules)
    assert rules["DevicedeckDeviceUnhealthy"]["for"] == "5m"
    for rule in rules.values():
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def check_fields(where: str, value: dict[str, Any], known: str) -> None:
    unknown = set(value) - KNOWN_FIELDS[known]
    assert not unknown, f"{where}: unknown fields {unknown}"


def test_custom_resources_use_only_fields_the_operator_knows() -> None:
    rule = find("PrometheusRule", "devicedeck")
    check_fields("PrometheusRule", rule["spec"], "PrometheusRule.spec")
    for group in rule["spec"]["groups"]:
        check_fields(group["name"], group, "PrometheusRule.group")
        for entry in group["rules"]:
            check_fields(entry["alert"], entry, "PrometheusRule.rule")
    monitors = [
        (find("ServiceMonitor", "devicedeck"), "endpoints"),
        (find("PodMonitor", "devicedeck-agent"), "podMetricsEndpoints"),
    ]
    for monitor, endpoints in monitors:
        kind = monitor["kind"]
        check_fields(kind, monitor["spec"], f"{kind}.spec")
        for endpoint in monitor["spec"][endpoints]:
            check_fields(f"{kind} endpoint", endpoint, "endpoint")
            for relabeling in endpoint.get("relabelings", []):
                check_fields(f"{kind} relabeling", relabeling, "relabeling")


def job_label(endpoint: Obj) -> str:
    (job,) = [r["replacement"] for r in endpoint["relabelings"] if r["targetLabel"] == "job"]
    return str(job)


def test_the_service_monitor_scrapes_the_service_metrics_port_as_the_rules_expect() -> None:
    monitor = find("ServiceMonitor", "devicedeck")
    service = find("Service", "devicedeck")
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    rules_text = RULES.read_text()
    assert f'up{{job="{job_label(endpoint)}"}}' in rules_text


def test_the_pod_monitor_and_service_reach_every_agents_metrics_port_with_its_node() -> None:
    agent = find("DaemonSet", "devicedeck-agent")
    namespace = agent["metadata"]["namespace"]
    ports = {p["name"] for c in containers(agent) for p in c.get("ports", [])}
    monitor = find("PodMonitor", "devicedeck-agent")
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [namespace]
    assert selects(monitor["spec"]["selector"]["matchLabels"], pod_labels(agent))
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
    assert f'up{{job="{job_label(endpoint)}"}}' in RULES.read_text()
    # The rules name agents by node: the pod's node becomes the label.
    assert {
        "sourceLabels": ["__meta_kubernetes_pod_node_name"],
        "targetLabel": "node",
    } in endpoint["relabelings"]
    service = find("Service", "devicedeck-agent-metrics")
    assert service["metadata"]["namespace"] == namespace
    assert service["spec"]["clusterIP"] == "None"
    assert selects(service["spec"]["selector"], pod_labels(agent))
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] in ports


# --- docs/metrics.md and the code ----------------------------------------------------------


def documented_metrics() -> dict[str, dict[str, str]]:
    """Every metric docs/metrics.md lists: name -> its type, labels and status."""
    metrics = {}
    for line in METRICS_DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"`devicedeck_[a-z_]+`", cells[0]):
            name, kind, labels, status, _ = cells
            metrics[name.strip("`")] = {"type": kind, "labels": labels, "status": status}
    assert len(metrics) > 10
    return metrics


def family_names(text: str) -> dict[str, set[str]]:
    """Exported metric names (counters with their _total) -> their label names."""
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        if family.name.endswith("_created"):
            continue  # the client library's creation time of each counter and histogram
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = {k for s in family.samples for k in s.labels if k not in ("le", "quantile")}
        names[name] = labels
    return names


def used_names(text: str) -> set[str]:
    return {re.sub(r"_bucket$|_count$|_sum$", "", n) for n in METRIC_NAME.findall(text)} - {"up"}


def test_rules_and_dashboard_use_only_documented_metrics() -> None:
    documented = set(documented_metrics())
    assert used_names(RULES.read_text()) <= documented
    assert used_names(DASHBOARD.read_text()) <= documented


def check_against_doc(exported: dict[str, set[str]], *, agent: bool) -> None:
    """Compare one program's metrics with its part of docs/metrics.md."""
    documented = {
        name: row
        for name, row in documented_metrics().items()
        if name.startswith("devicedeck_agent_") == agent
    }
    for name, labels in exported.items():
        if not name.startswith("devicedeck_"):
            continue
        assert name in documented, f"{name} is exported but not listed in docs/metrics.md"
        row = documented[name]
        assert row["status"] == "exported", f"{name} is exported: set its status to exported"
        listed = {lab.strip(" `") for lab in row["labels"].split(",") if lab.strip()}
        assert labels <= listed, f"{name}: labels {labels} are not those listed, {listed}"
    for name, row in documented.items():
        if row["status"] == "exported":
            assert name in exported, f"docs/metrics.md lists {name} as exported; it is not"
        else:
            assert row["status"] == "issue 20", f"{name}: unknown status {row['status']}"


def test_docs_list_every_agent_metric_as_exported() -> None:
    body, _ = AgentMetrics().render(None)  # the text format
    check_against_doc(family_names(body.decode()), agent=True)


def test_docs_list_every_service_metric_with_its_status(
    settings: Settings, auth: dict[str, str]
) -> None:
    # Opt-in metrics are switched on, where the settings know them, so that they show.
    options = {"metrics_per_device": True} if "metrics_per_device" in Settings.model_fields else {}
    with TestClient(create_app(settings.model_copy(update=options))) as client:
        snapshot = {
            "node": "node-a",
            "resource": "example.com/gpu",
            "devices": [{"ID": "gpu-0", "health": "Healthy"}],
            "source": {"boot_id": "b", "seq": 1},
            "observed_at": "2026-01-01T00:00:00Z",
        }
        response = client.post("/api/v1/ingest/listandwatch", json=snapshot, headers=auth)
        assert response.status_code == 200, response.text
        text = client.get("/metrics").text
    check_against_doc(family_names(text), agent=False)
