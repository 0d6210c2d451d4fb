"""Field and label selectors of list and watch requests (?fieldSelector=, ?labelSelector=)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devicedeck.sim.apiserver.errors import bad_request
from devicedeck.sim.apiserver.resources import Resource

COMMON_FIELDS = ("metadata.name", "metadata.namespace")
FIELDS_BY_KIND = {
    "Pod": (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    "Node": ("spec.unschedulable",),
    "ResourceSlice": ("spec.nodeName", "spec.driver"),
    "Event": (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    "Namespace": ("status.phase",),
}
# Field labels that name a field by another path.
FIELD_PATHS = {("Event", "source"): "source.component"}
Matcher = Callable[[dict[str, Any]], bool]
_SET_TERM = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _field_value(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_matcher(resource: Resource, selector: str) -> Matcher:
    terms: list[tuple[str, str, bool]] = []
    allowed = COMMON_FIELDS + FIELDS_BY_KIND.get(resource.kind, ())
    for term in filter(None, (t.strip() for t in selector.split(","))):
        match = re.match(r"^([^!=]+)(==|=|!=)(.*)$", term)
        if match is None:
            raise bad_request(f"invalid selector: '{selector}'; can't understand '{term}'")
        name, op, value = match.group(1).strip(), match.group(2), match.group(3).strip()
        if name not in allowed:
            raise bad_request(
                f'field label "{name}" not supported for {resource.kind}'
                if resource.group == ""
                else f'"{name}" is not a known field selector: only "metadata.name", '
                '"metadata.namespace"'
            )
        terms.append((FIELD_PATHS.get((resource.kind, name), name), value, op == "!="))
    return lambda obj: all((_field_value(obj, n) == v) != negate for n, v, negate in terms)


def _split_terms(selector: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [t.strip() for t in terms if t.strip()]


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str  # in, notin, exists, absent
    values: frozenset[str] = frozenset()

    def holds(self, labels: dict[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "absent":
            return self.key not in labels
        if self.op == "in":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values


def _requirement(term: str) -> _Requirement:
    set_term = _SET_TERM.match(term)
    if set_term:
        values = frozenset(v.strip() for v in set_term.group(3).split(",") if v.strip())
        return _Requirement(set_term.group(1), set_term.group(2), values)
    match = re.match(r"^([^!=\s]+)\s*(==|=|!=)\s*(\S*)$", term)
    if match:
        key, op, value = match.groups()
        return _Requirement(key, "notin" if op == "!=" else "in", frozenset([value]))
    if re.match(r"^![^!=\s]+$", term):
        return _Requirement(term[1:], "absent")
    if re.match(r"^[^!=\s()]+$", term):
        return _Requirement(term, "exists")
    raise bad_request(f"unable to parse requirement: {term!r}")


def label_matcher(selector: str) -> Matcher:
    requirements = [_requirement(term) for term in _split_terms(selector)]

    def matches(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.holds(labels) for r in requirements)

    return matches


def matcher(
    resource: Resource, namespace: str | None, fields: str | None, labels: str | None
) -> Matcher:
    by_field = field_matcher(resource, fields) if fields else None
    by_label = label_matcher(labels) if labels else None

    def matches(obj: dict[str, Any]) -> bool:
        if namespace is not None and (obj.get("metadata") or {}).get("namespace") != namespace:
            return False
        if by_field is not None and not by_field(obj):
            return False
        return by_label is None or by_label(obj)

    return matches
