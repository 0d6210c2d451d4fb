"""JSON Patch (RFC 6902) on plain dicts, and the API server's Status objects, for the fake."""

from __future__ import annotations

import copy
from typing import Any


def status_object(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class PatchError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status_object(code, reason, message)


def _tokens(path: str) -> list[str]:
    if not path.startswith("/"):
        raise PatchError(422, "Invalid", f"path {path!r} must start with '/'")
    # RFC 6901: "~1" -> "/" first, then "~0" -> "~".
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def apply_json_patch(document: dict[str, Any], operations: Any) -> dict[str, Any]:
    if not isinstance(operations, list):
        raise PatchError(400, "BadRequest", "a JSON Patch must be an array of operations")
    result = copy.deepcopy(document)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(400, "BadRequest", f"malformed operation {op!r}")
        *parents, last = _tokens(op["path"])
        target: Any = result
        for token in parents:
            if isinstance(target, dict) and token in target:
                target = target[token]
            elif isinstance(target, list) and token.isdigit() and int(token) < len(target):
                target = target[int(token)]
            else:
                raise PatchError(
                    422, "Invalid", f"doc is missing path: {op['path']!r}: missing value"
                )
        kind = op["op"]
        if not isinstance(target, dict):
            raise PatchError(422, "Invalid", f"only object members are supported: {op['path']}")
        if kind == "add":
            target[last] = op.get("value")
        elif kind == "replace":
            if last not in target:
                raise PatchError(
                    422,
                    "Invalid",
                    f"replace operation does not apply: doc is missing key: {op['path']}",
                )
            target[last] = op.get("value")
        elif kind == "remove":
            if last not in target:
                raise PatchError(
                    422, "Invalid", f"Unable to remove nonexistent key: {last}: missing value"
                )
            del target[last]
        elif kind == "test":
            if target.get(last) != op.get("value"):
                raise PatchError(409, "Conflict", f"testing value {op['path']} failed")
        else:
            raise PatchError(400, "BadRequest", f"unsupported operation {kind!r}")
    return result
