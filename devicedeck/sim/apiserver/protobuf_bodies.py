"""Request bodies kubectl sends as protobuf (`application/vnd.kubernetes.protobuf`), read
into the JSON form the routes take.

kubectl's typed clients send some objects in protobuf with no JSON fallback: the access
reviews behind `kubectl auth can-i` and `kubectl auth whoami`. Such a body is the magic
`k8s\\x00`, then a runtime.Unknown message (typeMeta = 1, raw = 2) whose raw bytes are the
object. Only the fields of the reviews are read; the answer goes back as JSON, which the
client accepts as well.
"""

from __future__ import annotations

from typing import Any

from devicedeck.sim.apiserver.errors import bad_request

PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

# A message's fields: number -> (JSON name, the nested message's fields, or None for a string).
Fields = dict[int, tuple[str, "Fields | None"]]
RESOURCE_ATTRIBUTES: Fields = {
    1: ("namespace", None),
    2: ("verb", None),
    3: ("group", None),
    4: ("version", None),
    5: ("resource", None),
    6: ("subresource", None),
    7: ("name", None),
}
NON_RESOURCE_ATTRIBUTES: Fields = {1: ("path", None), 2: ("verb", None)}
ACCESS_REVIEW: Fields = {
    2: (
        "spec",
        {
            1: ("resourceAttributes", RESOURCE_ATTRIBUTES),
            2: ("nonResourceAttributes", NON_RESOURCE_ATTRIBUTES),
        },
    )
}
RULES_REVIEW: Fields = {2: ("spec", {1: ("namespace", None)})}
SELF_REVIEW: Fields = {}
TYPE_META: Fields = {1: ("apiVersion", None), 2: ("kind", None)}


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


def _fields(data: bytes) -> list[tuple[int, bytes | int]]:
    """(field number, value) of each field: bytes for length-delimited ones, int otherwise."""
    found: list[tuple[int, bytes | int]] = []
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, at = _varint(data, at)
            found.append((number, value))
        elif wire_type == 2:
            length, at = _varint(data, at)
            if at + length > len(data):
                raise ValueError("truncated field")
            found.append((number, data[at : at + length]))
            at += length
        elif wire_type in (1, 5):
            size = 8 if wire_type == 1 else 4
            found.append((number, int.from_bytes(data[at : at + size], "little")))
            at += size
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
    return found


def _message(data: bytes, fields: Fields) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for number, value in _fields(data):
        if number not in fields or not isinstance(value, bytes):
            continue
        name, nested = fields[number]
        result[name] = value.decode() if nested is None else _message(value, nested)
    return result


def decode(body: bytes, fields: Fields) -> dict[str, Any]:
    """The object in a protobuf body, as JSON; 400 when it is not one."""
    if not body.startswith(MAGIC):
        raise bad_request("the protobuf body does not start with the Kubernetes magic number")
    try:
        envelope = dict(_fields(body[len(MAGIC) :]))
        type_meta = envelope.get(1, b"")
        raw = envelope.get(2, b"")
        if not isinstance(type_meta, bytes) or not isinstance(raw, bytes):
            raise ValueError("the envelope's fields have the wrong types")
        return _message(type_meta, TYPE_META) | _message(raw, fields)
    except (ValueError, UnicodeDecodeError) as e:
        raise bad_request(f"the protobuf body cannot be read: {e}") from e
