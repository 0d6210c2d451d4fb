"""WHERE conditions that list filters share."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement


def equal_where_given(*pairs: tuple[Any, Any]) -> list[ColumnElement[bool]]:
    """`column == value` for each (column, value) pair whose value the filter was given."""
    return [column == value for column, value in pairs if value is not None]
