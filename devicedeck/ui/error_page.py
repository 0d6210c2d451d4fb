"""Errors raised before, outside or inside a page's own handling (a NUL in the query string,
an unknown method, the database gone, a failure while rendering) answered as the dashboard's
HTML error page."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.routing import BaseRoute

from devicedeck.ui.render import render_error

HEADINGS = {
    400: "Bad request",
    401: "Not signed in",
    403: "Not allowed",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Request too large",
    422: "Invalid input",
    500: "Internal error",
    503: "Unavailable",
}
# The dashboard says this rather than the API's terse "see the service log".
INTERNAL_ERROR = (
    "The service failed while preparing this page. Nothing was changed; "
    "the service log has the details."
)


def page_sections(routers: Iterable[APIRouter]) -> frozenset[str]:
    """First path segments of the pages these routers serve ("" is the overview at "/").

    Taken from the routes themselves, so a new page answers its errors as a page without
    anyone remembering to list it."""
    return frozenset(_first_segment(route) for router in routers for route in router.routes)


def _first_segment(route: BaseRoute) -> str:
    path: str = getattr(route, "path", "/")
    return path.split("/", 2)[1]


class PageErrors:
    """The app's `ErrorPage`: an HTML error page for a path under one of the dashboard's
    sections, None (the API's JSON) for any other path."""

    def __init__(self, sections: frozenset[str]) -> None:
        self.sections = sections

    def is_page_path(self, path: str) -> bool:
        return path.split("/", 2)[1] in self.sections

    def __call__(
        self,
        request: Request,
        status: int,
        message: str,
        details: list[dict[str, Any]],
        headers: Mapping[str, str] | None,
    ) -> Response | None:
        if not self.is_page_path(request.url.path):
            return None
        response = render_error(
            request,
            status,
            HEADINGS.get(status, "Error"),
            INTERNAL_ERROR if status == 500 else message,
            problems=details,
        )
        response.headers.update(headers or {})
        return response
