"""The three patch types the API server accepts: JSON Patch, JSON merge patch, strategic merge.

JSON Patch is RFC 6902 (add, remove, replace, test, move, copy) with RFC 6901 pointers ("~1"
is "/", "~0" is "~"). Merge patch is RFC 7386. Strategic merge patch is the merge patch with
the Kubernetes rules for lists: lists of objects that have a merge key (conditions by type,
containers by name, ...) merge item by item, `$patch: delete` removes an item, and the
`$setElementOrder/` and `$retainKeys` directives the clients send are understood.
"""

from __future__ import annotations

import copy
from typing import Any

from devicedeck.sim.apiserver.errors import bad_request, patch_failed

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)
MAX_OPERATIONS = 10000

# Field name -> merge key, for the lists of the kinds this server keeps.
MERGE_KEYS = {
    "conditions": "type",
    "addresses": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "ownerReferences": "uid",
    "resourceClaims": "name",
}
# Lists of strings merged as sets. Every other list (taints, containerStatuses, ...) has no
# patch strategy in the API types, and a patch replaces it whole.
SET_LISTS = {"finalizers"}


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str):
        raise bad_request(f"path must be a string, got {path!r}")
    if path == "":
        return []
    if not path.startswith("/"):
        raise patch_failed(f"JSON pointer {path!r} must start with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _index(container: list[Any], token: str, path: str, *, adding: bool) -> int:
    if adding and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise patch_failed(f"{path}: {token!r} is not an array index")
    index = int(token)
    limit = len(container) if adding else len(container) - 1
    if index > limit:
        raise patch_failed(f"{path}: index {index} is out of bounds")
    return index


def _parent(document: Any, tokens: list[str], path: str) -> Any:
    target = document
    for token in tokens[:-1]:
        if isinstance(target, dict) and token in target:
            target = target[token]
        elif isinstance(target, list):
            target = target[_index(target, token, path, adding=False)]
        else:
            raise patch_failed(f"doc is missing path: {path!r}: missing value")
    if not isinstance(target, (dict, list)):
        raise patch_failed(f"doc is missing path: {path!r}: missing value")
    return target


def _get(document: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return document
    parent = _parent(document, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise patch_failed(f"doc is missing key: {path!r}: missing value")
        return parent[last]
    return parent[_index(parent, last, path, adding=False)]


def _add(document: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return copy.deepcopy(value)
    parent = _parent(document, tokens, path)
    if isinstance(parent, dict):
        parent[tokens[-1]] = copy.deepcopy(value)
    else:
        parent.insert(_index(parent, tokens[-1], path, adding=True), copy.deepcopy(value))
    return document


def _remove(document: Any, path: str, op: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise patch_failed(f"{op} operation does not apply: cannot remove the whole document")
    parent = _parent(document, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise patch_failed(f"Unable to remove nonexistent key: {last}: missing value")
        return parent.pop(last)
    return parent.pop(_index(parent, last, path, adding=False))


def apply_json_patch(document: dict[str, Any], operations: Any) -> Any:
    """RFC 6902; the document given is not changed. 400 for a malformed patch, 422 when an
    operation does not apply (a missing path, a failed test)."""
    if not isinstance(operations, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    if len(operations) > MAX_OPERATIONS:
        raise bad_request(f"The allowed maximum operations in a JSON patch is {MAX_OPERATIONS}")
    result: Any = copy.deepcopy(document)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation:
            raise bad_request(f"invalid JSON Patch operation {operation!r}: 'op' is required")
        op = operation["op"]
        path = operation.get("path")
        if not isinstance(path, str):
            raise bad_request(f"invalid JSON Patch operation {operation!r}: 'path' is required")
        if op in ("add", "replace", "test") and "value" not in operation:
            raise patch_failed(f"{op} operation at {path!r}: missing value")
        if op == "add":
            result = _add(result, path, operation["value"])
        elif op == "remove":
            _remove(result, path, op)
        elif op == "replace":
            _get(result, path)  # must exist
            if _pointer(path):
                _remove(result, path, op)
            result = _add(result, path, operation["value"])
        elif op == "test":
            if _get(result, path) != operation["value"]:
                raise patch_failed(f"testing value {path} failed: test failed")
        elif op in ("move", "copy"):
            source = operation.get("from")
            if not isinstance(source, str):
                raise bad_request(f"{op} operation needs 'from': {operation!r}")
            value = _get(result, source)
            if op == "move":
                _remove(result, source, op)
            result = _add(result, path, value)
        else:
            raise bad_request(f"Unexpected kind: {op}")
    return result


def apply_merge_patch(document: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(document) if isinstance(document, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def apply_strategic_merge_patch(document: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        raise bad_request("a strategic merge patch must be a JSON object")
    return _strategic(document if isinstance(document, dict) else {}, patch)


def _strategic(document: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = copy.deepcopy(document)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            if isinstance(result.get(name), list) and isinstance(value, list):
                result[name] = [v for v in result[name] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
            else:
                current = result.get(key)
                result[key] = _strategic(current if isinstance(current, dict) else {}, value)
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            result[key] = copy.deepcopy(value)
    for key, order in patch.items():
        if key.startswith("$setElementOrder/") and isinstance(order, list):
            name = key.split("/", 1)[1]
            if isinstance(result.get(name), list):
                result[name] = _ordered(name, result[name], order)
    return result


def _merge_list(name: str, current: Any, patch: list[Any]) -> list[Any]:
    existing = list(current) if isinstance(current, list) else []
    if name in SET_LISTS:
        return existing + [copy.deepcopy(v) for v in patch if v not in existing]
    key = MERGE_KEYS.get(name)
    if key is None:
        return [copy.deepcopy(v) for v in patch if not _is_directive(v)]
    if any(_is_directive(v) and v.get("$patch") == "replace" for v in patch):
        return [copy.deepcopy(v) for v in patch if not _is_directive(v)]
    merged = copy.deepcopy(existing)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise patch_failed(f"map: {item!r} does not contain declared merge key: {key}")
        position = next(
            (i for i, e in enumerate(merged) if isinstance(e, dict) and e.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                merged.pop(position)
        elif position is None:
            merged.append(_strategic({}, item))
        else:
            merged[position] = _strategic(merged[position], item)
    return merged


def _is_directive(value: Any) -> bool:
    return isinstance(value, dict) and "$patch" in value


def _ordered(name: str, items: list[Any], order: list[Any]) -> list[Any]:
    key = MERGE_KEYS.get(name)
    if key is None:
        return items

    def rank(item: Any) -> int:
        for i, entry in enumerate(order):
            if (
                isinstance(entry, dict)
                and isinstance(item, dict)
                and entry.get(key) == item.get(key)
            ):
                return i
        return len(order)

    return sorted(items, key=rank)


def apply_patch(content_type: str, document: dict[str, Any], patch: Any) -> Any:
    if content_type == JSON_PATCH:
        return apply_json_patch(document, patch)
    if content_type == MERGE_PATCH:
        if not isinstance(patch, dict):
            raise bad_request("a merge patch must be a JSON object")
        return apply_merge_patch(document, patch)
    return apply_strategic_merge_patch(document, patch)
