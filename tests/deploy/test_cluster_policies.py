"""Least privilege and availability on a cluster: Pod Security levels per namespace, the
NetworkPolicies of the network-policy component, and two service replicas that a drain or a
lost node does not take down together."""

from __future__ import annotations

from typing import Any

from .manifests import (
    AGENT_NAMESPACE,
    EVERYTHING,
    SERVER_NAMESPACE,
    Obj,
    find,
    pod_labels,
    pod_spec,
    selects,
)

# The Pod Security Standards' "restricted" level (which includes "baseline"), for the fields
# a pod spec here could set.
RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
ALLOWED_SECCOMP = {"RuntimeDefault", "Localhost"}


def restricted_violations(pod: Obj) -> list[str]:
    """What in this pod spec the Pod Security level "restricted" refuses; empty if none."""
    problems = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            problems.append(f"{field} is set")
    for volume in pod.get("volumes", []):
        (kind,) = set(volume) - {"name"}
        if kind not in RESTRICTED_VOLUME_TYPES:
            problems.append(f"volume {volume['name']} is a {kind} volume")
    pod_context = pod.get("securityContext", {})
    all_containers = [*pod.get("initContainers", []), *pod["containers"]]
    for container in all_containers:
        name = container["name"]
        context: dict[str, Any] = container.get("securityContext", {})

        def setting(key: str, context: dict[str, Any] = context) -> Any:
            return context.get(key, pod_context.get(key))

        if context.get("privileged"):
            problems.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        if setting("runAsNonRoot") is not True:
            problems.append(f"{name}: runAsNonRoot is not true")
        if setting("runAsUser") == 0:
            problems.append(f"{name}: runAsUser is 0")
        seccomp = (setting("seccompProfile") or {}).get("type")
        if seccomp not in ALLOWED_SECCOMP:
            problems.append(f"{name}: seccompProfile is {seccomp}")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            problems.append(f"{name}: capabilities do not drop ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: adds capabilities {capabilities['add']}")
        for port in container.get("ports", []):
            if port.get("hostPort"):
                problems.append(f"{name}: hostPort {port['hostPort']}")
    return problems


def pod_security_level(namespace: str) -> str:
    labels = find("Namespace", namespace)["metadata"]["labels"]
    level: str = labels["pod-security.kubernetes.io/enforce"]
    return level


def test_the_service_namespace_enforces_restricted_and_its_pods_satisfy_it() -> None:
    assert pod_security_level(SERVER_NAMESPACE) == "restricted"
    deployment = find("Deployment", "devicedeck")
    assert deployment["metadata"]["namespace"] == SERVER_NAMESPACE
    assert restricted_violations(pod_spec(deployment)) == []


def test_only_the_agents_namespace_is_privileged_and_only_the_agent_runs_there() -> None:
    assert pod_security_level(AGENT_NAMESPACE) == "privileged"
    agent = find("DaemonSet", "devicedeck-agent")
    assert agent["metadata"]["namespace"] == AGENT_NAMESPACE
    # The agent needs it for the kubelet's directories and root's access to them; it gives
    # up everything else restricted asks for.
    assert restricted_violations(pod_spec(agent)) == [
        "volume pod-resources is a hostPath volume",
        "volume device-plugins is a hostPath volume",
        "agent: runAsNonRoot is not true",
        "agent: runAsUser is 0",
    ]
    workloads = [o for _, o in EVERYTHING if "template" in o.get("spec", {})]
    in_agent_namespace = {
        o["metadata"]["name"] for o in workloads if o["metadata"]["namespace"] == AGENT_NAMESPACE
    }
    assert in_agent_namespace == {"devicedeck-agent"}
    namespaces = [o for _, o in EVERYTHING if o["kind"] == "Namespace"]
    assert {pod_security_level(n["metadata"]["name"]) for n in namespaces} == {
        "restricted",
        "privileged",
    }


# --- two replicas ------------------------------------------------------------------------


def test_the_service_runs_two_replicas_spread_over_nodes() -> None:
    deployment = find("Deployment", "devicedeck")
    assert deployment["spec"]["replicas"] >= 2
    # A rollout never takes a serving replica away before its successor is ready.
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    labels = pod_labels(deployment)
    constraints = {c["topologyKey"]: c for c in pod_spec(deployment)["topologySpreadConstraints"]}
    by_node = constraints["kubernetes.io/hostname"]
    assert by_node["whenUnsatisfiable"] == "DoNotSchedule" and by_node["maxSkew"] == 1
    by_zone = constraints["topology.kubernetes.io/zone"]
    # Preferred only: a cluster whose nodes carry no zone label still schedules both.
    assert by_zone["whenUnsatisfiable"] == "ScheduleAnyway"
    for constraint in constraints.values():
        assert selects(constraint["labelSelector"]["matchLabels"], labels)


def test_a_disruption_budget_keeps_one_replica_serving() -> None:
    deployment = find("Deployment", "devicedeck")
    budget = find("PodDisruptionBudget", "devicedeck")
    assert budget["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert selects(budget["spec"]["selector"]["matchLabels"], pod_labels(deployment))
    assert 1 <= budget["spec"]["minAvailable"] < deployment["spec"]["replicas"]
    assert "maxUnavailable" not in budget["spec"]


# --- network policies ----------------------------------------------------------------------

DNS_PORTS = [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
KUBE_DNS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}


def container_port_names(workload: Obj) -> set[str]:
    return {p["name"] for c in pod_spec(workload)["containers"] for p in c.get("ports", [])}


def policy_for(workload: Obj) -> Obj:
    (policy,) = [
        o
        for _, o in EVERYTHING
        if o["kind"] == "NetworkPolicy"
        and o["metadata"]["namespace"] == workload["metadata"]["namespace"]
        and selects(o["spec"]["podSelector"]["matchLabels"], pod_labels(workload))
    ]
    assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    return policy


def test_the_service_is_reachable_on_its_port_and_reaches_only_dns_database_and_api() -> None:
    deployment = find("Deployment", "devicedeck")
    policy = policy_for(deployment)
    # From anywhere (no `from`), to the HTTP port only.
    assert policy["spec"]["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}]}]
    assert "http" in container_port_names(deployment)
    egress = policy["spec"]["egress"]
    assert {"to": [KUBE_DNS], "ports": DNS_PORTS} in egress
    other_ports = {
        (p["port"], p["protocol"]) for rule in egress if "to" not in rule for p in rule["ports"]
    }
    assert other_ports == {(5432, "TCP"), (443, "TCP"), (6443, "TCP")}
    # Every rule names its ports: no rule opens everything.
    assert all(rule.get("ports") for rule in egress)


def test_agents_reach_only_dns_and_the_service_and_are_reachable_only_for_metrics() -> None:
    agent = find("DaemonSet", "devicedeck-agent")
    server = find("Deployment", "devicedeck")
    policy = policy_for(agent)
    assert policy["spec"]["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}]}]
    assert "metrics" in container_port_names(agent)
    dns, to_server = policy["spec"]["egress"]
    assert dns == {"to": [KUBE_DNS], "ports": DNS_PORTS}
    (peer,) = to_server["to"]
    namespace = peer["namespaceSelector"]["matchLabels"]
    assert namespace == {"kubernetes.io/metadata.name": server["metadata"]["namespace"]}
    assert selects(peer["podSelector"]["matchLabels"], pod_labels(server))
    (port,) = to_server["ports"]
    assert port["port"] in container_port_names(server)
