"""The resources this server keeps, and the discovery documents that describe them to kubectl.

Nodes, Pods, Leases and the DRA objects are what the simulators and the service use. The
other kinds (ServiceAccounts, Deployments, RBAC, ...) are kept as they are written, with no
controller acting on them, so that the project's own manifests can be applied to this server
(`kubectl apply -k deploy/kubernetes`) and read back. Reviews (TokenReview, the access
reviews) are answered, never stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KUBERNETES_VERSION = {"major": "1", "minor": "34", "gitVersion": "v1.34.0"}
OBJECT_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
STATUS_VERBS = ["get", "patch", "update"]
AUTH_GROUP = "authentication.k8s.io"
AUTHZ_GROUP = "authorization.k8s.io"
DRA_GROUP = "resource.k8s.io"
COORDINATION_GROUP = "coordination.k8s.io"
APPS_GROUP = "apps"
POLICY_GROUP = "policy"
RBAC_GROUP = "rbac.authorization.k8s.io"
NETWORKING_GROUP = "networking.k8s.io"
SCHEDULING_GROUP = "scheduling.k8s.io"


@dataclass(frozen=True)
class Resource:
    plural: str
    singular: str
    kind: str
    group: str
    version: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    # Whether it has a status subresource: writes to the object then leave status alone.
    has_status: bool = False
    # The API server's per-resource update strategy: whether a PUT without a resourceVersion
    # overwrites what is stored (nodes, pods) or is refused (leases, which exist to be
    # written with optimistic concurrency), and whether a PUT of a missing object creates it.
    unconditional_update: bool = True
    create_on_update: bool = False
    # Kept in memory only, and dropped after this many seconds (events, as etcd's TTL does).
    ttl_seconds: float | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """The resource as the API server names it in errors: `leases.coordination.k8s.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def discovery(self) -> list[dict[str, Any]]:
        entry: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": OBJECT_VERBS,
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        entries = [entry]
        if self.has_status:
            entries.append(
                {
                    "name": f"{self.plural}/status",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": STATUS_VERBS,
                }
            )
        return entries


@dataclass(frozen=True)
class Review:
    """A kind that is only ever created, and answered rather than stored."""

    plural: str
    kind: str
    group: str
    namespaced: bool = False

    def discovery(self) -> dict[str, Any]:
        return {
            "name": self.plural,
            "singularName": self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": ["create"],
        }


def _core(plural: str, kind: str, namespaced: bool, *short: str, **extra: Any) -> Resource:
    return Resource(plural, kind.lower(), kind, "", "v1", namespaced, short, **extra)


def _in(
    group: str, plural: str, kind: str, namespaced: bool, *short: str, **extra: Any
) -> Resource:
    return Resource(plural, kind.lower(), kind, group, "v1", namespaced, short, **extra)


NAMESPACES = _core("namespaces", "Namespace", False, "ns", has_status=True)
NODES = _core("nodes", "Node", False, "no", has_status=True)
PODS = _core("pods", "Pod", True, "po", has_status=True)
EVENTS = _core("events", "Event", True, "ev", ttl_seconds=3600.0)
SERVICE_ACCOUNTS = _core("serviceaccounts", "ServiceAccount", True, "sa")
SERVICES = _core("services", "Service", True, "svc", has_status=True)
CONFIG_MAPS = _core("configmaps", "ConfigMap", True, "cm")
SECRETS = _core("secrets", "Secret", True)
RESOURCE_SLICES = _in(DRA_GROUP, "resourceslices", "ResourceSlice", False)
RESOURCE_CLAIMS = _in(DRA_GROUP, "resourceclaims", "ResourceClaim", True, has_status=True)
LEASES = _in(
    COORDINATION_GROUP,
    "leases",
    "Lease",
    True,
    unconditional_update=False,
    create_on_update=True,
)
DEPLOYMENTS = _in(APPS_GROUP, "deployments", "Deployment", True, "deploy", has_status=True)
DAEMON_SETS = _in(APPS_GROUP, "daemonsets", "DaemonSet", True, "ds", has_status=True)
STATEFUL_SETS = _in(APPS_GROUP, "statefulsets", "StatefulSet", True, "sts", has_status=True)
POD_DISRUPTION_BUDGETS = _in(
    POLICY_GROUP, "poddisruptionbudgets", "PodDisruptionBudget", True, "pdb", has_status=True
)
ROLES = _in(RBAC_GROUP, "roles", "Role", True)
ROLE_BINDINGS = _in(RBAC_GROUP, "rolebindings", "RoleBinding", True)
CLUSTER_ROLES = _in(RBAC_GROUP, "clusterroles", "ClusterRole", False)
CLUSTER_ROLE_BINDINGS = _in(RBAC_GROUP, "clusterrolebindings", "ClusterRoleBinding", False)
NETWORK_POLICIES = _in(NETWORKING_GROUP, "networkpolicies", "NetworkPolicy", True, "netpol")
INGRESSES = _in(NETWORKING_GROUP, "ingresses", "Ingress", True, "ing", has_status=True)
PRIORITY_CLASSES = _in(SCHEDULING_GROUP, "priorityclasses", "PriorityClass", False, "pc")

RESOURCES = (
    NAMESPACES,
    NODES,
    PODS,
    EVENTS,
    SERVICE_ACCOUNTS,
    SERVICES,
    CONFIG_MAPS,
    SECRETS,
    RESOURCE_SLICES,
    RESOURCE_CLAIMS,
    LEASES,
    DEPLOYMENTS,
    DAEMON_SETS,
    STATEFUL_SETS,
    POD_DISRUPTION_BUDGETS,
    ROLES,
    ROLE_BINDINGS,
    CLUSTER_ROLES,
    CLUSTER_ROLE_BINDINGS,
    NETWORK_POLICIES,
    INGRESSES,
    PRIORITY_CLASSES,
)
TOKEN_REVIEWS = Review("tokenreviews", "TokenReview", AUTH_GROUP)
SELF_SUBJECT_REVIEWS = Review("selfsubjectreviews", "SelfSubjectReview", AUTH_GROUP)
SELF_SUBJECT_ACCESS_REVIEWS = Review(
    "selfsubjectaccessreviews", "SelfSubjectAccessReview", AUTHZ_GROUP
)
SELF_SUBJECT_RULES_REVIEWS = Review(
    "selfsubjectrulesreviews", "SelfSubjectRulesReview", AUTHZ_GROUP
)
REVIEWS = (
    TOKEN_REVIEWS,
    SELF_SUBJECT_REVIEWS,
    SELF_SUBJECT_ACCESS_REVIEWS,
    SELF_SUBJECT_RULES_REVIEWS,
)
GROUPS = tuple(sorted({r.group for r in RESOURCES if r.group} | {r.group for r in REVIEWS}))
BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}
# The store keys its collections by plural, which is why no two resources here share one.
BY_PLURAL = {r.plural: r for r in RESOURCES}
REVIEW_BY_PATH = {(r.group, r.plural): r for r in REVIEWS}


def _group(name: str, version: str) -> dict[str, Any]:
    gv = {"groupVersion": f"{name}/{version}", "version": version}
    return {"name": name, "versions": [gv], "preferredVersion": gv}


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def api_groups() -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(name, "v1") for name in GROUPS],
    }


def api_group(name: str) -> dict[str, Any] | None:
    if name not in GROUPS:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, "v1")}


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    """The APIResourceList of one group version (the core group is "")."""
    if version != "v1" or (group and group not in GROUPS):
        return None
    entries: list[dict[str, Any]] = []
    for resource in RESOURCES:
        if resource.group == group:
            entries.extend(resource.discovery())
    if group == "":
        entries.append(
            {
                "name": "serviceaccounts/token",
                "singularName": "",
                "namespaced": True,
                "group": AUTH_GROUP,
                "version": "v1",
                "kind": "TokenRequest",
                "verbs": ["create"],
            }
        )
    entries.extend(review.discovery() for review in REVIEWS if review.group == group)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }


def version_info() -> dict[str, Any]:
    return {
        **KUBERNETES_VERSION,
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "",
        "compiler": "devicedeck-sim",
        "platform": "linux/amd64",
    }
