"""Rules of the DRA and core/v1 types the read side applies: quantities, node selectors."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes.utils import parse_quantity

# Quantities -----------------------------------------------------------------------------------


def parse(value: Any) -> Decimal | None:
    try:
        parsed = parse_quantity(value)
    except (ValueError, TypeError, InvalidOperation):
        return None
    return parsed if isinstance(parsed, Decimal) else Decimal(parsed)


_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DECIMAL = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))


def format_quantity(amount: Decimal, like: str) -> str:
    """A quantity written with the largest suffix of the family `like` uses that divides it
    exactly ("80Gi" - "16Gi" -> "64Gi"), else as a plain number."""
    family = _BINARY if like.endswith("i") else _DECIMAL
    if amount == amount.to_integral_value() and amount != 0:
        whole = int(amount)
        for suffix, factor in family:
            if whole % factor == 0:
                return f"{whole // factor}{suffix}"
        return str(whole)
    if amount == 0:
        return "0"
    millis = amount * 1000
    if millis == millis.to_integral_value():
        return f"{int(millis)}m"
    return str(amount.normalize())


# Node selectors (core/v1 NodeSelector) --------------------------------------------------------


def _expression_matches(expression: dict[str, Any], values: dict[str, str]) -> bool:
    key = expression.get("key")
    operator = expression.get("operator")
    wanted = [str(v) for v in expression.get("values") or []]
    present = key in values
    if operator == "In":
        return present and values[str(key)] in wanted
    if operator == "NotIn":
        return not present or values[str(key)] not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(wanted) == 1:
        try:
            have, bound = int(values[str(key)]), int(wanted[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def selector_matches(selector: dict[str, Any], node: str, labels: dict[str, Any]) -> bool:
    """Terms are ORed, the requirements of a term ANDed; a term with no requirement matches
    no node, and neither does a selector without terms."""
    label_values = {str(k): str(v) for k, v in (labels or {}).items()}
    fields = {"metadata.name": node}
    for term in selector.get("nodeSelectorTerms") or []:
        expressions = term.get("matchExpressions") or []
        field_expressions = term.get("matchFields") or []
        if not expressions and not field_expressions:
            continue
        if all(_expression_matches(e, label_values) for e in expressions) and all(
            _expression_matches(e, fields) for e in field_expressions
        ):
            return True
    return False
