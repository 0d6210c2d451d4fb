"""Server-side field validation: fields a kind does not have, in an object sent to create or
replace. `fieldValidation=Strict` (what kubectl sends) refuses them with 400, `Warn` (the
default) answers with a warning, `Ignore` says nothing.

Fields are checked where the description of the kind lists every field: each kind's top
level, object metadata, owner references and taints. Deeper structures, described only in
part, are not checked here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from devicedeck.sim.apiserver.errors import bad_request
from devicedeck.sim.apiserver.openapi.documents import definitions, kind_definition
from devicedeck.sim.apiserver.openapi.model import Array, Definition, Map, Ref, Type
from devicedeck.sim.apiserver.resources import Resource


def check_fields(resource: Resource, body: Any, level: str) -> list[str]:
    """The warnings to answer with; raises 400 BadRequest under Strict."""
    if level == "Ignore" or not isinstance(body, dict):
        return []
    unknown = [f'unknown field "{path}"' for path in _unknown(body, kind_definition(resource))]
    if unknown and level == "Strict":
        raise bad_request(
            f'{resource.kind} in version "{resource.version}" cannot be handled as a '
            f"{resource.kind}: strict decoding error: {', '.join(unknown)}"
        )
    return unknown


def _unknown(obj: dict[str, Any], definition: Definition, prefix: str = "") -> Iterator[str]:
    for key, value in obj.items():
        path = f"{prefix}{key}"
        prop = definition.properties.get(key)
        if prop is None:
            if definition.closed:
                yield path
            continue
        yield from _unknown_in(value, prop.type, path)


def _unknown_in(value: Any, kind: Type, path: str) -> Iterator[str]:
    if isinstance(kind, Ref) and isinstance(value, dict):
        yield from _unknown(value, definitions()[kind.name], f"{path}.")
    elif isinstance(kind, Array) and isinstance(value, list):
        for index, item in enumerate(value):
            yield from _unknown_in(item, kind.items, f"{path}[{index}]")
    elif isinstance(kind, Map) and isinstance(value, dict):
        for key, item in value.items():
            yield from _unknown_in(item, kind.values, f"{path}[{key}]")
