"""deploy/kubernetes: every object is a valid Kubernetes object (the official client's
models), the agent mounts directories read-only, and RBAC grants exactly what devicedeck/kube calls,
the node status patch only through its optional component."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

import devicedeck.kube.client as kube_client
from devicedeck.config import Settings
from devicedeck.kube.client import Kind
from devicedeck.kube.service_accounts import AUDIENCE

from .helpers import REPO, parse_command
from .manifests import (
    AGENT_NAMESPACE,
    BASE,
    COMPONENT_DIRS,
    EVERYTHING,
    KUSTOMIZATION,
    MANIFESTS,
    MONITORING,
    SERVER_NAMESPACE,
    Obj,
    containers,
    find,
    manifest_files,
)

REQUIRED_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/part-of")
# Both read-only: the agent reads the checkpoint and connects to sockets, and connect()
# needs no write access to the directory (tests/deploy/test_read_only_mount.py shows it).
AGENT_DIRECTORIES = {
    "/var/lib/kubelet/pod-resources": True,
    "/var/lib/kubelet/device-plugins": True,
}
# Custom resources of the Prometheus Operator and of cert-manager: no model in the Kubernetes
# client (tests/deploy/test_monitoring.py and test_kustomize.py check them).
CUSTOM_GROUPS = {"monitoring.coreos.com", "cert-manager.io"}
CORE_OBJECTS = [(f, o) for f, o in EVERYTHING if o["apiVersion"].split("/")[0] not in CUSTOM_GROUPS]


def model_class(obj: Obj) -> str:
    version = obj["apiVersion"].split("/")[-1]
    return f"{version.capitalize()}{obj['kind']}"


def without_empty(value: Any) -> Any:
    """Drop None values, as the client does when it serialises a model."""
    if isinstance(value, dict):
        return {k: without_empty(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_empty(v) for v in value]
    return value


@pytest.mark.parametrize(
    "obj",
    [o for _, o in CORE_OBJECTS],
    ids=[f"{f}:{o['kind']}/{o['metadata']['name']}" for f, o in CORE_OBJECTS],
)
def test_manifest_deserialises_into_the_official_models_without_losing_fields(obj: Obj) -> None:
    api = k8s.ApiClient()
    try:
        model = api._ApiClient__deserialize(obj, model_class(obj))  # type: ignore[attr-defined]
        assert type(model).__name__ == model_class(obj)
        # Unknown or misspelt fields vanish in the model; serialising it back shows them.
        assert api.sanitize_for_serialization(model) == without_empty(obj)
    finally:
        api.close()


def test_every_object_carries_the_recommended_labels_and_namespace() -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}
    for filename, obj in EVERYTHING:
        labels = obj["metadata"].get("labels", {})
        for label in REQUIRED_LABELS:
            assert labels.get(label) == "devicedeck", f"{filename} {obj['kind']}: {label}"
        if obj["kind"] not in cluster_scoped:
            # The agent's objects in the agents' namespace, everything else in the service's.
            component = labels.get("app.kubernetes.io/component")
            namespace = AGENT_NAMESPACE if component == "agent" else SERVER_NAMESPACE
            if obj["kind"] == "Secret":
                namespace = obj["metadata"]["namespace"]  # the example shows both
            assert obj["metadata"]["namespace"] == namespace, f"{filename} {obj['kind']}"
        template = obj.get("spec", {}).get("template")
        if template is not None:
            pod_labels = template["metadata"]["labels"]
            assert set(REQUIRED_LABELS) <= set(pod_labels)
            assert obj["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_kustomization_applies_every_manifest_but_the_secret_example() -> None:
    kustomization = yaml.safe_load((MANIFESTS / KUSTOMIZATION).read_text())
    files = {p.name for p in manifest_files(MANIFESTS)}
    assert set(kustomization["resources"]) == files - {"secrets.example.yaml"}
    images = {c["image"].split(":")[0] for _, o in EVERYTHING for c in containers(o)}
    assert images == {i["name"] for i in kustomization["images"]}
    # Optional parts are off by default.
    assert "components" not in kustomization


@pytest.mark.parametrize("directory", [*COMPONENT_DIRS, MONITORING], ids=lambda d: d.name)
def test_each_component_lists_every_file_beside_it(directory: Path) -> None:
    kustomization = yaml.safe_load((directory / KUSTOMIZATION).read_text())
    assert kustomization["kind"] == "Component"
    listed = set(kustomization.get("resources", []))
    listed |= {
        f.split("=")[-1] for g in kustomization.get("configMapGenerator", []) for f in g["files"]
    }
    files = {p.name for p in manifest_files(directory)}
    files |= {p.name for p in directory.glob("*.json")}
    assert listed == files


def secret_ref(container: Obj, variable: str) -> tuple[str, str]:
    (entry,) = [e for e in container.get("env", []) if e["name"] == variable]
    ref = entry["valueFrom"]["secretKeyRef"]
    return ref["name"], ref["key"]


def test_server_deployment_probes_and_database_secret() -> None:
    deployment = find("Deployment", "devicedeck")
    pod = deployment["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    args = parse_command(server["args"])
    assert args.host == "0.0.0.0" and args.no_migrate
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    assert ports == {"http": args.port}
    assert server["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert server["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {
        server["livenessProbe"]["httpGet"]["port"],
        server["readinessProbe"]["httpGet"]["port"],
    } == {"http"}
    # The schema is migrated by an init container, so --no-migrate above is safe.
    (migrate,) = pod["initContainers"]
    assert parse_command(migrate["args"]).func.__name__ == "run_migrate"
    for container in (server, migrate):
        assert secret_ref(container, "DEVICEDECK_DATABASE_URL") == ("devicedeck-database", "url")
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
    env = {e["name"]: e.get("value") for e in server["env"]}
    assert env["DEVICEDECK_KUBE"] == "incluster"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["serviceAccountName"] == find("ServiceAccount", "devicedeck")["metadata"]["name"]


def test_service_is_cluster_ip_and_selects_the_server_pods() -> None:
    service = find("Service", "devicedeck")
    assert service["spec"]["type"] == "ClusterIP"
    pod_labels = find("Deployment", "devicedeck")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "http"


def test_agent_daemonset_mounts_kubelet_directories_read_only_never_sockets() -> None:
    daemonset = find("DaemonSet", "devicedeck-agent")
    pod = daemonset["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    (agent,) = pod["containers"]
    host_mounts = {}
    for mount in agent["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "hostPath" in volume:
            host = volume["hostPath"]
            assert host["type"] == "Directory", f"{host['path']} must be mounted as a directory"
            assert not host["path"].endswith(".sock")
            # Mounted where it lives on the host, so --kubelet-root is the real root.
            assert mount["mountPath"] == host["path"]
            host_mounts[host["path"]] = mount.get("readOnly", False)
    assert host_mounts == AGENT_DIRECTORIES
    args = parse_command([a.replace("$(NODE_NAME)", "node-1") for a in agent["args"]])
    assert args.node == "node-1"
    assert str(args.kubelet_root) == "/var/lib/kubelet"
    (node_name,) = [e for e in agent["env"] if e["name"] == "NODE_NAME"]
    assert node_name["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # The token is the pod's projected ServiceAccount token for the service's audience,
    # mounted read-only where --token-file points.
    token_mount = next(
        m for m in agent["volumeMounts"] if str(args.token_file).startswith(m["mountPath"])
    )
    assert token_mount["readOnly"] is True
    (source,) = volumes[token_mount["name"]]["projected"]["sources"]
    projected = source["serviceAccountToken"]
    assert projected["audience"] == AUDIENCE
    assert f"{token_mount['mountPath']}/{projected['path']}" == str(args.token_file)
    account = find("ServiceAccount", "devicedeck-agent")["metadata"]
    default = Settings.model_fields["agent_service_accounts"].default
    assert default == f"{account['namespace']}:{account['name']}"
    assert agent["securityContext"]["allowPrivilegeEscalation"] is False
    assert agent["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert "privileged" not in agent["securityContext"]


def test_agent_posts_to_the_service() -> None:
    agent = find("DaemonSet", "devicedeck-agent")["spec"]["template"]["spec"]["containers"][0]
    args = parse_command([a.replace("$(NODE_NAME)", "n") for a in agent["args"]])
    service = find("Service", "devicedeck")
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    assert args.server == f"http://{name}.{namespace}.svc:{service['spec']['ports'][0]['port']}"


def test_agent_liveness_probe_uses_its_metrics_port() -> None:
    agent = find("DaemonSet", "devicedeck-agent")["spec"]["template"]["spec"]["containers"][0]
    args = parse_command([a.replace("$(NODE_NAME)", "n") for a in agent["args"]])
    ports = {p["name"]: p["containerPort"] for p in agent["ports"]}
    assert ports == {"metrics": args.metrics_port}
    probe = agent["livenessProbe"]["httpGet"]
    assert (probe["path"], probe["port"]) == ("/healthz", "metrics")


def test_agent_has_no_api_server_access() -> None:
    account = find("ServiceAccount", "devicedeck-agent")
    assert account["automountServiceAccountToken"] is False
    pod = find("DaemonSet", "devicedeck-agent")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "devicedeck-agent"
    assert pod["automountServiceAccountToken"] is False
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        for _, obj in EVERYTHING:
            if obj["kind"] == kind:
                subjects = {(s["kind"], s["name"]) for s in obj["subjects"]}
                assert ("ServiceAccount", "devicedeck-agent") not in subjects


# --- RBAC against the code -------------------------------------------------------------

VERBS_BY_PREFIX = {
    "list": "list",
    "read": "get",
    "patch": "patch",
    "replace": "update",
    "create": "create",
    "delete": "delete",
}
CUSTOM_OBJECT_VERBS = {"list_cluster_custom_object": "list"}
AUTHENTICATION_GRANTS = {"create_token_review": ("authentication.k8s.io", "tokenreviews", "create")}
# The leader election's Lease, in the service's own namespace: a Role, not the ClusterRole.
COORDINATION_GRANTS = {
    "read_namespaced_lease": ("coordination.k8s.io", "leases", "get"),
    "create_namespaced_lease": ("coordination.k8s.io", "leases", "create"),
    "replace_namespaced_lease": ("coordination.k8s.io", "leases", "update"),
}
API_CLASSES = {"CoreV1Api", "CustomObjectsApi", "AuthenticationV1Api", "CoordinationV1Api"}
Grant = tuple[str, str, str]  # (apiGroup, resource, verb)


def core_method_grants(method: str) -> set[Grant]:
    """CoreV1Api method name -> the grant it needs, e.g. patch_node_status -> nodes/status."""
    match = re.fullmatch(
        r"(list|read|patch|replace|create|delete)_(?:namespaced_)?([a-z_]+?)"
        r"(_for_all_namespaces)?(_status)?",
        method,
    )
    assert match, f"CoreV1Api.{method}: teach this test which RBAC it needs"
    prefix, kind, _, status = match.groups()
    resource = kind.replace("_", "") + "s" + ("/status" if status else "")
    return {("", resource, VERBS_BY_PREFIX[prefix])}


def kube_sources() -> dict[Path, str]:
    return {p: p.read_text() for p in sorted((REPO / "devicedeck" / "kube").glob("*.py"))}


def grants_used_by_code() -> set[Grant]:
    sources = kube_sources()
    text = "\n".join(sources.values())
    grants: set[Grant] = set()
    for api_class in re.findall(r"\b(\w+Api)\(", text):
        assert api_class in API_CLASSES | {"KubeApi"}, f"{api_class}: teach this test its RBAC"
    for method in set(re.findall(r"\.core\.(\w+)", text)):
        grants |= core_method_grants(method)
    for method in set(re.findall(r"\.custom\.(\w+)", text)):
        assert method in CUSTOM_OBJECT_VERBS, f"CustomObjectsApi.{method}: teach this test"
    for method in set(re.findall(r"\.authentication\.(\w+)", text)):
        assert method in AUTHENTICATION_GRANTS, f"AuthenticationV1Api.{method}: teach this test"
        grants.add(AUTHENTICATION_GRANTS[method])
    for method in set(re.findall(r"\.coordination\.(\w+)", text)):
        assert method in COORDINATION_GRANTS, f"CoordinationV1Api.{method}: teach this test"
        grants.add(COORDINATION_GRANTS[method])
    # Collections are listed and watched generically by Kind (KubeApi.list_all, open_watch).
    client_text = sources[REPO / "devicedeck" / "kube" / "client.py"]
    generic_verbs = set()
    if re.search(r"\.list_all\(", text):
        generic_verbs.add("list")
    if re.search(r"\.open_watch\(", text) and "watch=True" in client_text:
        generic_verbs.add("watch")
    kinds = {n: v for n, v in vars(kube_client).items() if isinstance(v, Kind)}
    others = "\n".join(t for p, t in sources.items() if p.name != "client.py")
    for constant, kind in kinds.items():
        if not re.search(rf"\b{constant}\b", others):
            continue  # defined but never watched
        # "v1" (the core group), "group/version", or a group alone whose version the client
        # picks from what the cluster serves.
        version = kind.api_version
        group = version.rpartition("/")[0] if "/" in version else "" if version == "v1" else version
        grants |= {(group, kind.name, verb) for verb in generic_verbs}
    return grants


def granted(role: Obj) -> set[Grant]:
    """What a role allows, on every object or on named ones alike."""
    grants = set()
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), "no wildcards"
                    grants.add((group, resource, verb))
    return grants


NODE_STATUS_PATCH: Grant = ("", "nodes/status", "patch")


def test_server_rbac_grants_exactly_what_app_kube_calls() -> None:
    needed = grants_used_by_code()
    assert NODE_STATUS_PATCH in needed, "the code scan found no status patch"
    assert {("", "nodes", "watch"), ("resource.k8s.io", "resourceclaims", "list")} <= needed
    assert {("authentication.k8s.io", "tokenreviews", "create"), ("", "pods", "get")} <= needed
    leases = set(COORDINATION_GRANTS.values())
    assert leases <= needed, "the code scan found no leader election"
    # The base grants all but the status patch, which only the optional component adds;
    # the Lease only in the service's namespace.
    cluster_wide = needed - {NODE_STATUS_PATCH} - leases
    assert granted(find("ClusterRole", "devicedeck-server")) == cluster_wide
    assert granted(find("ClusterRole", "devicedeck-server-node-status")) == {NODE_STATUS_PATCH}
    role = find("Role", "devicedeck-server-leader-election")
    assert role["metadata"]["namespace"] == SERVER_NAMESPACE
    assert granted(role) == leases
    base_roles = [o for _, o in BASE if o["kind"] in ("Role", "ClusterRole")]
    assert [r["metadata"]["name"] for r in base_roles] == [
        "devicedeck-server",
        "devicedeck-server-leader-election",
    ]


def named(role: Obj) -> dict[Grant, list[str] | None]:
    """Each grant of a role -> the object names it is limited to (None: every object)."""
    names: dict[Grant, list[str] | None] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    names[(group, resource, verb)] = rule.get("resourceNames")
    return names


def test_the_lease_role_reads_and_renews_one_lease_by_name() -> None:
    """Create cannot be limited by name in Kubernetes RBAC (a create request names no
    object); the rest can, and is. The name is the setting's default, which the Deployment
    keeps."""
    lease_name = Settings.model_fields["leader_lease_name"].default
    role = named(find("Role", "devicedeck-server-leader-election"))
    assert role == {
        ("coordination.k8s.io", "leases", "get"): [lease_name],
        ("coordination.k8s.io", "leases", "update"): [lease_name],
        ("coordination.k8s.io", "leases", "create"): None,
    }
    (server,) = find("Deployment", "devicedeck")["spec"]["template"]["spec"]["containers"]
    assert "DEVICEDECK_LEADER_LEASE_NAME" not in {e["name"] for e in server["env"]}
    for _, obj in EVERYTHING:
        if obj["kind"] == "ClusterRole":
            assert all(names is None for names in named(obj).values()), obj["metadata"]


def test_the_agent_has_a_priority_above_workloads_and_below_the_system() -> None:
    pod = find("DaemonSet", "devicedeck-agent")["spec"]["template"]["spec"]
    priority = find("PriorityClass", pod["priorityClassName"])
    # Values above 1e9 are the system's; 0 is every pod's without a class.
    assert 0 < priority["value"] <= 1_000_000_000
    assert priority["globalDefault"] is False
    assert priority["preemptionPolicy"] in ("PreemptLowerPriority", "Never")


@pytest.mark.parametrize("role", ["devicedeck-server", "devicedeck-server-node-status"])
def test_server_roles_are_bound_to_the_server_account_only(role: str) -> None:
    binding = find("ClusterRoleBinding", role)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "devicedeck", "namespace": SERVER_NAMESPACE}
    ]
    roles = [o for _, o in EVERYTHING if o["kind"] in ("Role", "ClusterRole")]
    assert len(roles) == 3


def test_the_leader_election_role_is_bound_to_the_server_account_in_its_namespace() -> None:
    binding = find("RoleBinding", "devicedeck-server-leader-election")
    assert binding["metadata"]["namespace"] == SERVER_NAMESPACE
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "devicedeck-server-leader-election",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "devicedeck", "namespace": SERVER_NAMESPACE}
    ]
