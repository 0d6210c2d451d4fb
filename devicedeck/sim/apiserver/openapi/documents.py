"""The OpenAPI documents, generated from the kind descriptions and the resource table:
`/openapi/v2` (Swagger 2.0, one document, in JSON or protobuf) and `/openapi/v3` (an index of
one OpenAPI 3.0 document per group version, each at `/openapi/v3/api/v1` or
`/openapi/v3/apis/GROUP/VERSION`).

kubectl reads them for `explain`, and to learn whether the server validates fields itself
(a `fieldValidation` query parameter on the kind's PATCH operation): then it sends
`fieldValidation=Strict` and leaves the checking to the server. PATCH operations list JSON
patch and merge patch only: kubectl then builds its strategic merge patches from the types
it was compiled with, which know every field, rather than from these shorter schemas.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any

from devicedeck.sim.apiserver import resources as res
from devicedeck.sim.apiserver.openapi import core, groups, meta
from devicedeck.sim.apiserver.openapi.model import (
    STATUS,
    Array,
    Definition,
    Map,
    Open,
    Prim,
    Prop,
    Ref,
    Type,
    gvk_extension,
    list_definition,
)
from devicedeck.sim.apiserver.openapi.protobuf_v2 import encode_document

TITLE = "Kubernetes"
JSON = "application/json"
PATCH_CONTENT_TYPES = ("application/json-patch+json", "application/merge-patch+json")
QUERY_PARAMETERS = {
    "dryRun": "All: check the request and answer the result without storing anything.",
    "fieldManager": "The name of the actor making the change.",
    "fieldValidation": "Ignore, Warn or Strict: what to do with fields the kind lacks.",
    "labelSelector": "Only objects with these labels.",
    "fieldSelector": "Only objects with these field values.",
    "limit": "At most this many objects; a continue token asks for more.",
    "continue": "The token of the page to read next.",
    "resourceVersion": "The version to list at, or to watch from.",
    "watch": "Stream changes instead of listing.",
    "timeoutSeconds": "End a watch after this many seconds.",
    "allowWatchBookmarks": "Let a watch send BOOKMARK events.",
    "includeObject": "What each row of a Table carries: None, Metadata or Object.",
}
WRITE_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation")
LIST_PARAMETERS = (
    "labelSelector",
    "fieldSelector",
    "limit",
    "continue",
    "resourceVersion",
    "watch",
    "timeoutSeconds",
    "allowWatchBookmarks",
)


def _kinds() -> list[Definition]:
    return [*meta.DEFINITIONS, *core.DEFINITIONS, *groups.DEFINITIONS]


@cache
def definitions() -> dict[str, Definition]:
    """Every definition by name, with a List definition for each kind a resource serves."""
    found = {d.name: d for d in _kinds()}
    for resource in res.RESOURCES:
        listed = list_definition(kind_definition(resource))
        found[listed.name] = listed
    return found


def kind_definition(resource: res.Resource | res.Review) -> Definition:
    group = resource.group
    version = resource.version if isinstance(resource, res.Resource) else "v1"
    for definition in _kinds():
        if definition.kind == (group, version, resource.kind):
            return definition
    raise LookupError(f"no schema describes {resource.kind} in {group or 'core'}/{version}")


# --- schemas -----------------------------------------------------------------------------------


def _reference(name: str, v3: bool) -> str:
    return f"#/components/schemas/{name}" if v3 else f"#/definitions/{name}"


def type_schema(kind: Type, v3: bool) -> dict[str, Any]:
    if isinstance(kind, Prim):
        schema: dict[str, Any] = {"type": kind.type}
        if kind.format:
            schema["format"] = kind.format
        if kind.enum:
            schema["enum"] = list(kind.enum)
        return schema
    if isinstance(kind, Ref):
        return {"$ref": _reference(kind.name, v3)}
    if isinstance(kind, Array):
        schema = {"type": "array", "items": _item_schema(kind.items, v3)}
        if kind.merge_key:
            schema |= {
                "x-kubernetes-patch-merge-key": kind.merge_key,
                "x-kubernetes-patch-strategy": "merge",
                "x-kubernetes-list-map-keys": [kind.merge_key],
            }
        if kind.list_type:
            schema["x-kubernetes-list-type"] = kind.list_type
        return schema
    if isinstance(kind, Map):
        return {"type": "object", "additionalProperties": _item_schema(kind.values, v3)}
    assert isinstance(kind, Open)
    return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _item_schema(kind: Type, v3: bool) -> dict[str, Any]:
    if isinstance(kind, Ref) and v3:
        return {"allOf": [type_schema(kind, v3)], "default": {}}
    return type_schema(kind, v3)


def property_schema(prop: Prop, v3: bool) -> dict[str, Any]:
    if isinstance(prop.type, Ref) and v3:
        # OpenAPI 3.0 ignores a $ref's siblings: the description goes beside an allOf.
        return {"allOf": [type_schema(prop.type, v3)], "description": prop.description}
    return type_schema(prop.type, v3) | {"description": prop.description}


def definition_schema(definition: Definition, v3: bool) -> dict[str, Any]:
    if definition.scalar is not None:
        return type_schema(definition.scalar, v3) | {"description": definition.description}
    schema: dict[str, Any] = {
        "type": "object",
        "description": definition.description,
        "properties": {
            name: property_schema(prop, v3) for name, prop in definition.properties.items()
        },
    }
    required = sorted(name for name, prop in definition.properties.items() if prop.required)
    if required:
        schema["required"] = required
    if definition.kind is not None:
        schema["x-kubernetes-group-version-kind"] = [gvk_extension(definition.kind)]
    return schema


def _refs(kind: Type) -> set[str]:
    if isinstance(kind, Ref):
        return {kind.name}
    if isinstance(kind, Array):
        return _refs(kind.items)
    if isinstance(kind, Map):
        return _refs(kind.values)
    return set()


def reachable(names: set[str]) -> set[str]:
    """These definitions and every one they refer to."""
    known = definitions()
    seen: set[str] = set()
    pending = list(names)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for prop in known[name].properties.values():
            pending.extend(_refs(prop.type) - seen)
    return seen


# --- paths -------------------------------------------------------------------------------------


def _prefix(resource: res.Resource) -> str:
    return f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"


def _camel(text: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in text.replace(".", "-").split("-"))


def _operation_id(verb: str, resource: res.Resource, scope: str) -> str:
    group = _camel(resource.group.removesuffix(".k8s.io")) if resource.group else "Core"
    return f"{verb}{group}{_camel(resource.version)}{scope}{resource.kind}"


def _parameters(names: tuple[str, ...], path: list[str], v3: bool) -> list[dict[str, Any]]:
    params = []
    for name in path:
        entry: dict[str, Any] = {"name": name, "in": "path", "required": True}
        entry["description"] = f"The {name} of the object."
        params.append(entry | ({"schema": {"type": "string"}} if v3 else {"type": "string"}))
    for name in names:
        entry = {"name": name, "in": "query", "description": QUERY_PARAMETERS[name]}
        params.append(entry | ({"schema": {"type": "string"}} if v3 else {"type": "string"}))
    return params


def _operation(
    action: str,
    verb: str,
    resource: res.Resource,
    scope: str,
    answer: str,
    path_params: list[str],
    v3: bool,
) -> dict[str, Any]:
    query = {
        "list": (*LIST_PARAMETERS, "includeObject"),
        "post": WRITE_PARAMETERS,
        "put": WRITE_PARAMETERS,
        "patch": WRITE_PARAMETERS,
        "delete": ("dryRun",),
        "get": ("includeObject",),
    }[action]
    body = kind_definition(resource).name
    operation: dict[str, Any] = {
        "description": f"{verb} {resource.kind} objects"
        if action == "list"
        else f"{verb} a {resource.kind}",
        "operationId": _operation_id(verb, resource, scope),
        "tags": [_camel(resource.group or "core") + _camel(resource.version)],
        "parameters": _parameters(query, path_params, v3),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk_extension(
            kind_definition(resource).kind or ("", "", "")
        ),
    }
    answer_schema = {"$ref": _reference(answer, v3)}
    if v3:
        operation["responses"] = {
            "200": {"description": "OK", "content": {JSON: {"schema": answer_schema}}}
        }
        if action in ("post", "put"):
            operation["requestBody"] = {
                "content": {"*/*": {"schema": {"$ref": _reference(body, v3)}}},
                "required": True,
            }
        if action == "patch":
            operation["requestBody"] = {
                "content": {t: {"schema": {"type": "object"}} for t in PATCH_CONTENT_TYPES},
                "required": True,
            }
    else:
        operation["responses"] = {"200": {"description": "OK", "schema": answer_schema}}
        operation["produces"] = [JSON]
        operation["consumes"] = list(PATCH_CONTENT_TYPES) if action == "patch" else ["*/*"]
        if action in ("post", "put", "patch"):
            schema = {"$ref": _reference(body, v3)} if action != "patch" else {"type": "object"}
            operation["parameters"].insert(
                0, {"name": "body", "in": "body", "required": True, "schema": schema}
            )
    return operation


def resource_paths(resource: res.Resource, v3: bool) -> dict[str, dict[str, Any]]:
    kind = kind_definition(resource).name
    listed = f"{kind}List"
    base = _prefix(resource)
    scope = "Namespaced" if resource.namespaced else ""
    path_params = ["namespace"] if resource.namespaced else []
    collection = (
        f"{base}/namespaces/{{namespace}}/{resource.plural}"
        if resource.namespaced
        else f"{base}/{resource.plural}"
    )
    item = f"{collection}/{{name}}"

    def op(
        action: str, verb: str, answer: str, params: list[str], scoped: str = scope
    ) -> dict[str, Any]:
        return _operation(action, verb, resource, scoped, answer, params, v3)

    paths: dict[str, dict[str, Any]] = {
        collection: {
            "get": op("list", "list", listed, path_params),
            "post": op("post", "create", kind, path_params),
        },
        item: {
            "get": op("get", "read", kind, [*path_params, "name"]),
            "put": op("put", "replace", kind, [*path_params, "name"]),
            "patch": op("patch", "patch", kind, [*path_params, "name"]),
            "delete": op("delete", "delete", STATUS, [*path_params, "name"]),
        },
    }
    if resource.namespaced:
        paths[f"{base}/{resource.plural}"] = {
            "get": op("list", "list", listed, [], f"{resource.kind}ForAllNamespaces")
        }
    if resource.has_status:
        paths[f"{item}/status"] = {
            "get": op("get", "read", kind, [*path_params, "name"], f"{scope}Status"),
            "put": op("put", "replace", kind, [*path_params, "name"], f"{scope}Status"),
            "patch": op("patch", "patch", kind, [*path_params, "name"], f"{scope}Status"),
        }
    return paths


# --- documents ---------------------------------------------------------------------------------


def _schemas(names: set[str], v3: bool) -> dict[str, Any]:
    known = definitions()
    return {name: definition_schema(known[name], v3) for name in sorted(reachable(names))}


def _wanted(resources: list[res.Resource]) -> set[str]:
    names = {STATUS}
    for resource in resources:
        kind = kind_definition(resource).name
        names |= {kind, f"{kind}List"}
    return names


@cache
def v2_document() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for resource in res.RESOURCES:
        paths |= resource_paths(resource, v3=False)
    names = _wanted(list(res.RESOURCES)) | {kind_definition(r).name for r in res.REVIEWS}
    return {
        "swagger": "2.0",
        "info": {"title": TITLE, "version": res.KUBERNETES_VERSION["gitVersion"]},
        "paths": dict(sorted(paths.items())),
        "definitions": _schemas(names, v3=False),
    }


@cache
def v2_protobuf() -> bytes:
    return encode_document(v2_document())


def group_version_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


@cache
def v3_documents() -> dict[str, dict[str, Any]]:
    """One document per group version, by its path under /openapi/v3/."""
    documents = {}
    for group in ("", *res.GROUPS):
        served = [r for r in res.RESOURCES if r.group == group]
        reviews = [r for r in res.REVIEWS if r.group == group]
        paths: dict[str, Any] = {}
        for resource in served:
            paths |= resource_paths(resource, v3=True)
        names = _wanted(served) | {kind_definition(r).name for r in reviews}
        documents[group_version_path(group, "v1")] = {
            "openapi": "3.0.0",
            "info": {"title": TITLE, "version": res.KUBERNETES_VERSION["gitVersion"]},
            "paths": dict(sorted(paths.items())),
            "components": {"schemas": _schemas(names, v3=True)},
        }
    return documents


def _digest(document: dict[str, Any]) -> str:
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest().upper()


@cache
def v3_index() -> dict[str, Any]:
    """The discovery document: where each group version's document is, with its hash."""
    return {
        "paths": {
            path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={_digest(document)}"}
            for path, document in v3_documents().items()
        }
    }
