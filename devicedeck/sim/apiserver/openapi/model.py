"""A small description language for the kinds this server serves, from which the OpenAPI
documents (v2 and v3) are generated.

A definition has a name (the Kubernetes schema name, `io.k8s.api.core.v1.Node`), a
description and its properties. A property's type is a primitive, a reference to another
definition, an array, a map, or an open object: a subtree described only in words, whose
fields neither explain lists nor field validation checks. A definition marked `closed`
lists every field the kind has, and field validation refuses or warns about others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
OBJECT_META = f"{META}.ObjectMeta"
LIST_META = f"{META}.ListMeta"
TIME = f"{META}.Time"
MICRO_TIME = f"{META}.MicroTime"
LABEL_SELECTOR = f"{META}.LabelSelector"
STATUS = f"{META}.Status"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"


@dataclass(frozen=True)
class Prim:
    type: str  # string, integer, boolean, number
    format: str = ""
    enum: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Array:
    items: Type
    # The strategic merge patch key of a list of objects, and the list's type for
    # server-side apply (atomic, set or map).
    merge_key: str = ""
    list_type: str = ""


@dataclass(frozen=True)
class Map:
    values: Type


@dataclass(frozen=True)
class Open:
    """An object whose fields are not described here."""


Type = Prim | Ref | Array | Map | Open


@dataclass(frozen=True)
class Prop:
    type: Type
    description: str
    required: bool = False


@dataclass(frozen=True)
class Definition:
    name: str
    description: str
    properties: dict[str, Prop] = field(default_factory=dict)
    # (group, version, kind) of a top-level kind.
    kind: tuple[str, str, str] | None = None
    closed: bool = False
    # A definition that is a scalar on the wire (Quantity, Time): its type.
    scalar: Prim | None = None


# --- shorthands for the descriptions ---------------------------------------------------------


def string(description: str, *enum: str, required: bool = False) -> Prop:
    return Prop(Prim("string", enum=enum), description, required)


def integer(description: str, fmt: str = "int32", required: bool = False) -> Prop:
    return Prop(Prim("integer", fmt), description, required)


def boolean(description: str) -> Prop:
    return Prop(Prim("boolean"), description)


def ref(name: str, description: str, required: bool = False) -> Prop:
    return Prop(Ref(name), description, required)


def time(description: str) -> Prop:
    return ref(TIME, description)


def strings(description: str, list_type: str = "atomic") -> Prop:
    return Prop(Array(Prim("string"), list_type=list_type), description)


def array_of(name: str, description: str, merge_key: str = "", required: bool = False) -> Prop:
    list_type = "map" if merge_key else "atomic"
    return Prop(Array(Ref(name), merge_key, list_type), description, required)


def open_list(description: str, merge_key: str = "") -> Prop:
    return Prop(Array(Open(), merge_key, "map" if merge_key else "atomic"), description)


def string_map(description: str) -> Prop:
    return Prop(Map(Prim("string")), description)


def quantities(description: str) -> Prop:
    return Prop(Map(Ref(QUANTITY)), description)


def open_object(description: str) -> Prop:
    return Prop(Open(), description)


def kind_definition(
    name: str,
    gvk: tuple[str, str, str],
    description: str,
    /,
    **properties: Prop,
) -> Definition:
    """A top-level kind: apiVersion, kind and metadata, then its own fields; closed."""
    group, version, kind = gvk
    api_version = f"{group}/{version}" if group else version
    common = {
        "apiVersion": string(
            f"The versioned schema of this representation of the object: {api_version}."
        ),
        "kind": string(f"The kind of object this is: {kind}."),
        "metadata": ref(OBJECT_META, "The object's name, namespace, labels and other metadata."),
    }
    return Definition(name, description, common | properties, kind=gvk, closed=True)


def list_definition(item: Definition) -> Definition:
    assert item.kind is not None
    group, version, kind = item.kind
    return Definition(
        f"{item.name}List",
        f"A list of {kind} objects.",
        {
            "apiVersion": string("The versioned schema of this representation of the list."),
            "kind": string(f"{kind}List."),
            "metadata": ref(LIST_META, "The list's resourceVersion and continue token."),
            "items": array_of(item.name, f"The {kind} objects.", required=True),
        },
        kind=(group, version, f"{kind}List"),
    )


def gvk_extension(gvk: tuple[str, str, str]) -> dict[str, Any]:
    group, version, kind = gvk
    return {"group": group, "kind": kind, "version": version}
