"""The resources this server keeps, and the discovery documents that describe them to kubectl."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KUBERNETES_VERSION = {"major": "1", "minor": "34", "gitVersion": "v1.34.0"}
OBJECT_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
STATUS_VERBS = ["get", "patch", "update"]
AUTH_GROUP = "authentication.k8s.io"
DRA_GROUP = "resource.k8s.io"
COORDINATION_GROUP = "coordination.k8s.io"


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

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

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


NODES = Resource("nodes", "node", "Node", "", "v1", False, ("no",), has_status=True)
PODS = Resource("pods", "pod", "Pod", "", "v1", True, ("po",), has_status=True)
RESOURCE_SLICES = Resource(
    "resourceslices", "resourceslice", "ResourceSlice", DRA_GROUP, "v1", False
)
RESOURCE_CLAIMS = Resource(
    "resourceclaims", "resourceclaim", "ResourceClaim", DRA_GROUP, "v1", True, has_status=True
)
LEASES = Resource(
    "leases",
    "lease",
    "Lease",
    COORDINATION_GROUP,
    "v1",
    True,
    unconditional_update=False,
    create_on_update=True,
)
RESOURCES = (NODES, PODS, RESOURCE_SLICES, RESOURCE_CLAIMS, LEASES)
GROUPS = (AUTH_GROUP, COORDINATION_GROUP, DRA_GROUP)
BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}
BY_PLURAL = {r.plural: r for r in RESOURCES}


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
    if version != "v1":
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
    elif group == AUTH_GROUP:
        entries.append(
            {
                "name": "tokenreviews",
                "singularName": "tokenreview",
                "namespaced": False,
                "kind": "TokenReview",
                "verbs": ["create"],
            }
        )
    elif group not in GROUPS:
        return None
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
