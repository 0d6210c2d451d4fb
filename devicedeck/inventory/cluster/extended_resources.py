"""Extended resource names and quantities as the API server writes them."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes.utils import parse_quantity

from devicedeck.kubelet.names import extended_resource_name_problem


def is_extended_resource(name: str) -> bool:
    return extended_resource_name_problem(name) is None


def quantity(value: Any) -> int | None:
    """An extended resource quantity ("4", "1k") as an integer, or None if it is not one:
    extended resources are integer-only."""
    try:
        parsed = parse_quantity(value)
    except (ValueError, TypeError, InvalidOperation):
        return None
    if not isinstance(parsed, Decimal) or parsed != parsed.to_integral_value():
        return None
    return int(parsed)
