"""A request as the routes see it, and what a REST path names."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from devicedeck.sim.apiserver import resources as res
from devicedeck.sim.apiserver.errors import bad_request


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes = b""
    # Who sent it, once authenticated: username, groups (and uid, extra for tokens).
    user: dict[str, Any] | None = None

    def json(self) -> Any:
        try:
            return json.loads(self.body or b"null")
        except ValueError as e:
            raise bad_request(f"the body of the request is not valid JSON: {e}") from e

    def param(self, name: str, default: str = "") -> str:
        return self.query.get(name, [default])[0]

    def params(self, name: str) -> list[str]:
        return self.query.get(name, [])

    @property
    def watching(self) -> bool:
        return self.param("watch") in ("true", "1")


@dataclass(frozen=True)
class Target:
    """What a REST path names: a resource, maybe a namespace, a name and a subresource."""

    resource: res.Resource
    namespace: str | None
    name: str | None
    subresource: str | None


def target_of(group: str, version: str, rest: list[str]) -> Target | None:
    """The object or collection `rest` names under /api/v1 or /apis/GROUP/VERSION."""
    namespace = None
    # /namespaces/NAME/status is the namespace's own status, not a collection inside it.
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2:] != ["status"]:
        namespace, rest = rest[1], rest[2:]
    if not 1 <= len(rest) <= 3:
        return None
    resource = res.BY_PATH.get((group, version, rest[0]))
    if resource is None or (namespace is not None and not resource.namespaced):
        return None
    name = rest[1] if len(rest) >= 2 else None
    subresource = rest[2] if len(rest) == 3 else None
    if subresource is not None and (subresource != "status" or not resource.has_status):
        return None
    if resource.namespaced and name is not None and namespace is None:
        return None
    return Target(resource, namespace, name, subresource)
