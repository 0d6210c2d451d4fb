"""The verbs on objects and collections: list (as objects or as a Table), get, create,
replace, patch and delete, with the write options kubectl sends (`dryRun=All`,
`fieldManager`, `fieldValidation`)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from devicedeck.sim.apiserver import tables
from devicedeck.sim.apiserver.errors import ApiError, bad_request, invalid
from devicedeck.sim.apiserver.field_validation import check_fields
from devicedeck.sim.apiserver.patches import PATCH_TYPES
from devicedeck.sim.apiserver.request import Request, Target
from devicedeck.sim.apiserver.selectors import matcher

if TYPE_CHECKING:
    from devicedeck.sim.apiserver.store import Store

FIELD_VALIDATION = ("Ignore", "Warn", "Strict")
OPTIONS_KIND = {
    "POST": "CreateOptions",
    "PUT": "UpdateOptions",
    "PATCH": "PatchOptions",
    "DELETE": "DeleteOptions",
}


def method_not_allowed(method: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", f"the server does not allow this method ({method})")


@dataclass(frozen=True)
class WriteOptions:
    dry_run: bool
    field_validation: str

    @classmethod
    def of(cls, request: Request, body_dry_run: Any = None) -> WriteOptions:
        kind = f"{OPTIONS_KIND.get(request.method, 'CreateOptions')}.meta.k8s.io"
        dry_run = request.params("dryRun")
        if isinstance(body_dry_run, list):
            dry_run = dry_run + [str(v) for v in body_dry_run]
        for value in dry_run:
            if value != "All":
                raise invalid(
                    kind, "", [("dryRun", f'Unsupported value: "{value}": supported values: "All"')]
                )
        validation = request.param("fieldValidation")
        if validation and validation not in FIELD_VALIDATION:
            supported = ", ".join(f'"{v}"' for v in FIELD_VALIDATION)
            raise invalid(
                kind,
                "",
                [
                    (
                        "fieldValidation",
                        f'Unsupported value: "{validation}": supported values: {supported}',
                    )
                ],
            )
        return cls(bool(dry_run), validation or "Warn")


@dataclass
class Answer:
    code: int
    body: dict[str, Any]
    warnings: list[str]


def serve(store: Store, request: Request, target: Target) -> Answer:
    """Every verb but watch."""
    resource, namespace, name = target.resource, target.namespace, target.name
    method = request.method
    if name is None:
        if method == "GET":
            return Answer(200, list_objects(store, request, target), [])
        if method == "POST" and (namespace is not None or not resource.namespaced):
            options = WriteOptions.of(request)
            body = request.json()
            warnings = check_fields(resource, body, options.field_validation)
            new = store.create(resource, namespace, body, dry_run=options.dry_run)
            return Answer(201, new, warnings)
        raise method_not_allowed(method)
    if method == "GET":
        obj = store.get(resource, namespace, name)
        wanted = tables.wanted_table(
            request.headers.get("accept", ""), request.param("includeObject")
        )
        if wanted is not None:
            version = obj["metadata"].get("resourceVersion", "")
            obj = tables.table(resource.kind, [obj], wanted, {"resourceVersion": version})
        return Answer(200, obj, [])
    if method == "PUT":
        options = WriteOptions.of(request)
        body = request.json()
        warnings = check_fields(resource, body, options.field_validation)
        created, obj = store.replace(
            resource,
            namespace,
            name,
            body,
            subresource=target.subresource,
            dry_run=options.dry_run,
        )
        return Answer(201 if created else 200, obj, warnings)
    if method == "PATCH":
        content_type = request.headers.get("content-type", "").split(";")[0].strip()
        if content_type not in PATCH_TYPES:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(PATCH_TYPES)}",
            )
        options = WriteOptions.of(request)
        patched = store.update(
            resource,
            namespace,
            name,
            request.json(),
            subresource=target.subresource,
            content_type=content_type,
            dry_run=options.dry_run,
        )
        return Answer(200, patched, [])
    if method == "DELETE" and target.subresource is None:
        body = request.json() if request.body else {}
        body = body if isinstance(body, dict) else {}
        options = WriteOptions.of(request, body.get("dryRun"))
        deleted = store.delete(
            resource, namespace, name, body.get("preconditions"), dry_run=options.dry_run
        )
        return Answer(200, deleted, [])
    raise method_not_allowed(method)


def list_objects(store: Store, request: Request, target: Target) -> dict[str, Any]:
    """A page of the collection, in name order, as a List or as the Table asked for."""
    wanted = tables.wanted_table(request.headers.get("accept", ""), request.param("includeObject"))
    matches = matcher(
        target.resource,
        target.namespace,
        request.param("fieldSelector") or None,
        request.param("labelSelector") or None,
    )
    items, version = store.list(target.resource, matches)
    metadata: dict[str, Any] = {"resourceVersion": str(version)}
    limit_text, token = request.param("limit"), request.param("continue")
    if token:
        try:
            version, after = json.loads(_unb64(token))
        except (ValueError, TypeError) as e:
            raise bad_request(f"continue key is not valid: {e}") from e
        items = [i for i in items if sort_key(i) > after]
        metadata["resourceVersion"] = str(version)
    if limit_text.isdigit() and 0 < int(limit_text) < len(items):
        items = items[: int(limit_text)]
        metadata["continue"] = _b64(json.dumps([version, sort_key(items[-1])]))
    if wanted is not None:
        return tables.table(target.resource.kind, items, wanted, metadata)
    return {
        "kind": f"{target.resource.kind}List",
        "apiVersion": target.resource.api_version,
        "metadata": metadata,
        "items": items,
    }


def sort_key(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata.get('name')}" if namespace else str(metadata.get("name"))


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


def _unb64(text: str) -> str:
    return base64.urlsafe_b64decode(text.encode()).decode()
