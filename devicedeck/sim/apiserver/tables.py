"""Server-side printing: lists and objects as meta.k8s.io Tables, which `kubectl get` asks for
(`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`) and prints as they come.

Every column (printers.py) is sent; kubectl hides those of priority 1 unless asked for
`-o wide`. Each row carries the object's metadata
(`includeObject=Metadata`, the default), the whole object (`Object`) or nothing (`None`); with
`--all-namespaces` kubectl takes the NAMESPACE column from that metadata.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from devicedeck.sim.apiserver.errors import ApiError, bad_request
from devicedeck.sim.apiserver.printers import DEFAULT_COLUMNS, PRINTERS, default_cells

TABLE_GROUP = "meta.k8s.io"
TABLE_VERSIONS = ("v1", "v1beta1")
INCLUDE_OBJECT = ("Metadata", "Object", "None")


@dataclass(frozen=True)
class TableRequest:
    """That the client asked for a Table, in which version, with what in each row."""

    version: str
    include_object: str = "Metadata"


def wanted_table(accept: str, include_object: str) -> TableRequest | None:
    """The Table the Accept header asks for, if its first media type this server can answer
    is one. A client asking for Tables only, in a version this server lacks, gets 406."""
    asked_for_table = False
    for media_type in accept.split(","):
        essence, *params = [part.strip() for part in media_type.split(";")]
        options = dict(p.split("=", 1) for p in params if "=" in p)
        if options.get("as") == "Table":
            asked_for_table = True
            if essence == "application/json" and (
                options.get("g") == TABLE_GROUP and options.get("v") in TABLE_VERSIONS
            ):
                if include_object and include_object not in INCLUDE_OBJECT:
                    raise bad_request(
                        f"includeObject: unsupported value {include_object!r}: supported values "
                        f"are {', '.join(INCLUDE_OBJECT)}"
                    )
                return TableRequest(options["v"], include_object or "Metadata")
        elif essence in ("application/json", "application/*", "*/*", "") and "as" not in options:
            return None
    if asked_for_table:
        raise ApiError(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json, "
            "application/json;as=Table;v=v1;g=meta.k8s.io",
        )
    return None


def _row_object(obj: dict[str, Any], request: TableRequest) -> dict[str, Any] | None:
    if request.include_object == "None":
        return None
    if request.include_object == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"{TABLE_GROUP}/{request.version}",
        "metadata": obj.get("metadata") or {},
    }


def table(
    kind: str,
    items: list[dict[str, Any]],
    request: TableRequest,
    metadata: dict[str, Any],
    *,
    headers: bool = True,
) -> dict[str, Any]:
    """The Table of these objects of one kind; without `headers`, no column definitions, as
    in every watch event after the first."""
    columns, cells = PRINTERS.get(kind, (DEFAULT_COLUMNS, default_cells))
    now = datetime.now(UTC)
    result: dict[str, Any] = {
        "kind": "Table",
        "apiVersion": f"{TABLE_GROUP}/{request.version}",
        "metadata": metadata,
        "columnDefinitions": [c.definition() for c in columns] if headers else None,
        "rows": [{"cells": cells(obj, now), "object": _row_object(obj, request)} for obj in items],
    }
    return result
