"""DRA objects as the API server serves them, in any served version, read into one shape.

resource.k8s.io/v1 (1.34+) and v1beta2 (1.33+) put a device's fields on the device itself;
v1beta1 (1.32) puts them under `basic`. Everything else Devicedeck reads has the same name in
all three.
"""

from __future__ import annotations

from typing import Any


def device_fields(device: dict[str, Any]) -> dict[str, Any]:
    """A slice's device with its fields where v1 has them (v1beta1 nests them in `basic`)."""
    basic = device.get("basic")
    if isinstance(basic, dict):
        return {**basic, "name": device.get("name")}
    return device


def _single_value(value: Any) -> Any:
    """{"string": "a100"} -> "a100": DRA wraps each attribute in a typed member."""
    if isinstance(value, dict) and len(value) == 1:
        return next(iter(value.values()))
    return value


def attributes(device: dict[str, Any]) -> dict[str, Any]:
    return {k: _single_value(v) for k, v in (device.get("attributes") or {}).items()}


def capacity(device: dict[str, Any]) -> dict[str, Any]:
    """name -> {"value", "request_policy"}: one shape whether or not a policy is set (v1alpha3
    wrote a bare quantity, later versions {"value": ...})."""
    shaped: dict[str, Any] = {}
    for name, entry in (device.get("capacity") or {}).items():
        if isinstance(entry, dict):
            policy = entry.get("requestPolicy")
            shaped[name] = {
                "value": str(entry.get("value")) if entry.get("value") is not None else None,
                "request_policy": policy if isinstance(policy, dict) else None,
            }
        else:
            shaped[name] = {"value": str(entry), "request_policy": None}
    return shaped


def node_selection(spec: dict[str, Any], device: dict[str, Any]) -> dict[str, Any]:
    """Where a device can be used: its own node selection when the slice says
    perDeviceNodeSelection, else the slice's."""
    source = device if spec.get("perDeviceNodeSelection") else spec
    selector = source.get("nodeSelector")
    return {
        "node": source.get("nodeName") or None,
        "all_nodes": bool(source.get("allNodes")),
        "node_selector": selector if isinstance(selector, dict) else None,
    }
