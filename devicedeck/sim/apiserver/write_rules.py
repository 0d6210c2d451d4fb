"""How a write becomes the stored object: the kind and version sent must be the resource's,
a write to the status subresource changes only status and a write to the object everything
else, and system metadata always stays the server's."""

from __future__ import annotations

import copy
from typing import Any

from devicedeck.sim.apiserver.errors import bad_request
from devicedeck.sim.apiserver.resources import Resource


def check_type(resource: Resource, obj: dict[str, Any]) -> None:
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if kind not in (None, "", resource.kind) or api_version not in (
        None,
        "",
        resource.api_version,
    ):
        raise bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({resource.api_version})"
            if api_version not in (None, "", resource.api_version)
            else f"the kind in the data ({kind}) does not match the expected kind ({resource.kind})"
        )


def merged_object(
    resource: Resource,
    current: dict[str, Any],
    proposed: dict[str, Any],
    subresource: str | None,
) -> dict[str, Any]:
    """The stored object after a write: the status subresource changes only status, the
    object itself everything else; system metadata always stays the server's."""
    if subresource == "status":
        merged = copy.deepcopy(current)
        merged["status"] = copy.deepcopy(proposed.get("status") or {})
    else:
        merged = copy.deepcopy(proposed)
        if resource.has_status:
            if "status" in current:
                merged["status"] = copy.deepcopy(current["status"])
            else:
                merged.pop("status", None)
    merged["apiVersion"], merged["kind"] = resource.api_version, resource.kind
    metadata = merged.setdefault("metadata", {})
    for field in ("name", "namespace", "uid", "creationTimestamp", "resourceVersion"):
        if field in current["metadata"]:
            metadata[field] = current["metadata"][field]
    return merged
