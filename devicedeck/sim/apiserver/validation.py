"""What the API server checks before it stores an object: names, and the quantities of a
node's capacity and allocatable. A refused object answers 422 Invalid and changes nothing."""

from __future__ import annotations

import re
from typing import Any

from devicedeck.kubelet.names import dns1123_label_problem, dns1123_subdomain_problem
from devicedeck.sim.apiserver.errors import bad_request, invalid
from devicedeck.sim.apiserver.resources import Resource

QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[eE][+-]?\d+|[numkMGTPE])?$")
QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def normalise_quantities(obj: dict[str, Any]) -> None:
    """Numbers become strings, as a Quantity serialises itself."""
    status = obj.get("status")
    if not isinstance(status, dict):
        return
    for section in ("capacity", "allocatable"):
        values = status.get(section)
        if isinstance(values, dict):
            for key, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    values[key] = str(int(value) if float(value).is_integer() else value)


def validate(resource: Resource, obj: Any, name_hint: str = "") -> None:
    if not isinstance(obj, dict):
        raise invalid(resource.kind, name_hint, [("", "must be an object")])
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        raise invalid(resource.kind, name_hint, [("metadata", "Required value")])
    name = metadata.get("name")
    problems: list[tuple[str, str]] = []
    if not isinstance(name, str) or not name:
        problems.append(("metadata.name", "Required value: name or generateName is required"))
    else:
        problem = dns1123_subdomain_problem(name)
        if problem:
            problems.append(("metadata.name", f'Invalid value: "{name}": {problem}'))
    namespace = metadata.get("namespace")
    if resource.namespaced and isinstance(namespace, str):
        problem = dns1123_label_problem(namespace)
        if problem:
            problems.append(("metadata.namespace", f'Invalid value: "{namespace}": {problem}'))
    labels = metadata.get("labels")
    if labels is not None and (
        not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values())
    ):
        problems.append(("metadata.labels", "Invalid value: label values must be strings"))
    if resource.kind == "Node":
        problems += _node_problems(obj)
    if resource.kind == "Lease":
        problems += _lease_problems(obj)
    if problems:
        raise invalid(resource.kind, str(name or name_hint), problems)


def _node_problems(obj: dict[str, Any]) -> list[tuple[str, str]]:
    status = obj.get("status")
    if status is None:
        return []
    if not isinstance(status, dict):
        return [("status", "Invalid value: must be an object")]
    problems = []
    for section in ("capacity", "allocatable"):
        values = status.get(section)
        if values is None:
            continue
        if not isinstance(values, dict):
            problems.append((f"status.{section}", "Invalid value: must be an object"))
            continue
        for key, value in values.items():
            field = f"status.{section}[{key}]"
            if not QUALIFIED_NAME.match(key) or len(key) > 316:
                problems.append((field, f'Invalid value: "{key}": must be a qualified name'))
            elif not isinstance(value, str) or not QUANTITY.match(value):
                problems.append(
                    (
                        field,
                        f"Invalid value: {value!r}: quantities must match the regular "
                        "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                    )
                )
    return problems


LEASE_INTEGERS = ("leaseDurationSeconds", "leaseTransitions")
LEASE_STRINGS = ("holderIdentity", "acquireTime", "renewTime")


def _lease_problems(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """The API server's Lease checks: a duration above 0, transitions not below 0. A value of
    the wrong type does not decode at all, which it answers 400 BadRequest."""
    spec = obj.get("spec")
    if spec is None:
        return []
    if not isinstance(spec, dict):
        raise bad_request(
            'Lease in version "v1" cannot be handled as a Lease: spec must be an object'
        )
    for field, wanted in [(f, int) for f in LEASE_INTEGERS] + [(f, str) for f in LEASE_STRINGS]:
        value = spec.get(field)
        if value is not None and (not isinstance(value, wanted) or isinstance(value, bool)):
            raise bad_request(
                f'Lease in version "v1" cannot be handled as a Lease: spec.{field} must be '
                f"{'an integer' if wanted is int else 'a string'}, not {value!r}"
            )
    problems = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        problems.append(
            ("spec.leaseDurationSeconds", f"Invalid value: {duration}: must be greater than 0")
        )
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        problems.append(
            (
                "spec.leaseTransitions",
                f"Invalid value: {transitions}: must be greater than or equal to 0",
            )
        )
    return problems
