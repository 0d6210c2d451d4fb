"""The list envelope every list route answers with: results, next (a URL), count."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from fastapi import Request
from pydantic import BaseModel

from app.inventory.pages import Page

T = TypeVar("T")


class ListEnvelope(BaseModel, Generic[T]):
    results: list[T]
    next: str | None
    count: int | None


def envelope(request: Request, page: Page[Any]) -> dict[str, Any]:
    next_url = None
    if page.next_cursor is not None:
        next_url = str(request.url.include_query_params(cursor=page.next_cursor))
    return {"results": page.items, "next": next_url, "count": page.count}
