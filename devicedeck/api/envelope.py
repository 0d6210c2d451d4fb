"""The list envelope every list route answers with: results, next (a link), count, and
whether count is exact (past 10,000 matches it is the database's estimate)."""

from __future__ import annotations

from typing import Any, Generic, TypeVar, get_args

from fastapi import Request
from pydantic import BaseModel, ConfigDict

from devicedeck.api.examples import example_of
from devicedeck.inventory.read.pagination import Page
from devicedeck.web.state import service_state

T = TypeVar("T")


def _example(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """One page of one item, the item being the example of the model the list holds."""
    (item,) = get_args(model.model_fields["results"].annotation)
    if isinstance(item, type) and issubclass(item, BaseModel):
        schema["examples"] = [
            {
                "results": [example_of(item)],
                "next": "/api/v1/devices?limit=1&cursor=eyJrIjpbMTddfQ",
                "count": 8,
                "count_exact": True,
            }
        ]


class ListEnvelope(BaseModel, Generic[T]):
    model_config = ConfigDict(json_schema_extra=_example)

    results: list[T]
    next: str | None
    count: int | None
    count_exact: bool = True


def envelope(request: Request, page: Page[Any]) -> dict[str, Any]:
    next_url = None
    if page.next_cursor is not None:
        # Never built from the Host header, which the client chooses: a path relative to the
        # service, or an absolute URL under the configured public URL.
        url = request.url.include_query_params(cursor=page.next_cursor)
        next_url = f"{url.path}?{url.query}"
        public_url = service_state(request.app).settings.public_url
        if public_url:
            next_url = public_url.rstrip("/") + next_url
    return {
        "results": page.items,
        "next": next_url,
        "count": page.count,
        "count_exact": page.count_exact,
    }
