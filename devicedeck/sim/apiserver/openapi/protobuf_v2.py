"""/openapi/v2 in protobuf, as client-go asks for it: the Swagger 2.0 document encoded as
the gnostic `openapi.v2.Document` message.

Only the parts of the message this server's document uses are written, by field number:
info, paths with their operations (parameters, responses, vendor extensions), and the
definitions with their schemas. A vendor extension's value travels as YAML text, as gnostic
writes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

# What client-go asks for, and the spelling the answer carries (Go's media type parser
# refuses the "@" of the first).
ACCEPTED = (
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
)
MEDIA_TYPE = ACCEPTED[1]
OPERATIONS = {"get": 2, "put": 3, "post": 4, "delete": 5, "patch": 8}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _text(number: int, value: str) -> bytes:
    return _bytes(number, value.encode()) if value else b""


def _flag(number: int, value: bool) -> bytes:
    return _varint(number << 3) + _varint(1) if value else b""


def _texts(number: int, values: Iterable[str]) -> bytes:
    return b"".join(_bytes(number, v.encode()) for v in values)


def _any(value: Any) -> bytes:
    """gnostic's Any: the value as YAML (field 2)."""
    return _text(2, yaml.safe_dump(value, default_flow_style=False, sort_keys=True))


def _extensions(number: int, node: dict[str, Any]) -> bytes:
    """Every `x-` key of the node as a NamedAny (name = 1, value = 2)."""
    return b"".join(
        _bytes(number, _text(1, key) + _bytes(2, _any(value)))
        for key, value in node.items()
        if key.startswith("x-")
    )


def schema(node: dict[str, Any]) -> bytes:
    out = _text(1, node.get("$ref", "")) + _text(2, node.get("format", ""))
    out += _text(4, node.get("description", ""))
    out += _texts(19, node.get("required", []))
    out += b"".join(_bytes(20, _any(v)) for v in node.get("enum", []))
    additional = node.get("additionalProperties")
    if isinstance(additional, dict):
        out += _bytes(21, _bytes(1, schema(additional)))
    if "type" in node:
        out += _bytes(22, _text(1, node["type"]))
    if "items" in node:
        out += _bytes(23, _bytes(1, schema(node["items"])))
    out += b"".join(_bytes(24, schema(s)) for s in node.get("allOf", []))
    if "properties" in node:
        named = b"".join(
            _bytes(1, _text(1, name) + _bytes(2, schema(value)))
            for name, value in node["properties"].items()
        )
        out += _bytes(25, named)
    return out + _extensions(31, node)


def _parameter(node: dict[str, Any]) -> bytes:
    where = node["in"]
    if where == "body":
        body = _text(1, node.get("description", "")) + _text(2, node["name"])
        body += _text(3, where) + _flag(4, node.get("required", False))
        body += _bytes(5, schema(node["schema"]))
        parameter = _bytes(1, body)
    else:
        common = _flag(1, node.get("required", False)) + _text(2, where)
        common += _text(3, node.get("description", "")) + _text(4, node["name"])
        # The query sub-schema has allow_empty_value at 5 and type at 6; the path one type at 5.
        if where == "query":
            parameter = _bytes(2, _bytes(3, common + _text(6, node.get("type", "string"))))
        else:
            parameter = _bytes(2, _bytes(4, common + _text(5, node.get("type", "string"))))
    return _bytes(1, parameter)


def _operation(node: dict[str, Any]) -> bytes:
    out = _texts(1, node.get("tags", [])) + _text(3, node.get("description", ""))
    out += _text(5, node.get("operationId", "")) + _texts(6, node.get("produces", []))
    out += _texts(7, node.get("consumes", []))
    out += b"".join(_bytes(8, _parameter(p)) for p in node.get("parameters", []))
    responses = b""
    for code, answer in node.get("responses", {}).items():
        response = _text(1, answer.get("description", ""))
        if "schema" in answer:
            response += _bytes(2, _bytes(1, schema(answer["schema"])))
        responses += _bytes(1, _text(1, code) + _bytes(2, _bytes(1, response)))
    out += _bytes(9, responses)
    return out + _extensions(13, node)


def encode_document(document: dict[str, Any]) -> bytes:
    info = document.get("info", {})
    out = _text(1, document["swagger"])
    out += _bytes(2, _text(1, info.get("title", "")) + _text(2, info.get("version", "")))
    paths = b""
    for path, item in document["paths"].items():
        operations = b"".join(
            _bytes(number, _operation(item[verb]))
            for verb, number in OPERATIONS.items()
            if verb in item
        )
        paths += _bytes(2, _text(1, path) + _bytes(2, operations))
    out += _bytes(8, paths)
    definitions = b"".join(
        _bytes(1, _text(1, name) + _bytes(2, schema(value)))
        for name, value in document["definitions"].items()
    )
    return out + _bytes(9, definitions)
