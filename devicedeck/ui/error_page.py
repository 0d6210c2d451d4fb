"""Errors raised before or outside a page's own handling (a NUL in the query string, an
unknown method, the database gone) answered as the dashboard's HTML error page."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from devicedeck.ui.render import render_error

# First path segments served by the dashboard; "/" is the overview. /ui/stream is an event
# stream read by a script, and /static serves files: neither shows a page.
PAGE_SECTIONS = frozenset({"nodes", "devices", "pods", "events", "login", "logout"})

HEADINGS = {
    400: "Bad request",
    401: "Not signed in",
    403: "Not allowed",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Request too large",
    422: "Invalid input",
    503: "Unavailable",
}


def is_page_path(path: str) -> bool:
    return path == "/" or path.split("/", 2)[1] in PAGE_SECTIONS


def page_error(
    request: Request,
    status: int,
    message: str,
    details: list[dict[str, Any]],
    headers: Mapping[str, str] | None,
) -> Response | None:
    if not is_page_path(request.url.path):
        return None
    response = render_error(
        request, status, HEADINGS.get(status, "Error"), message, problems=details
    )
    response.headers.update(headers or {})
    return response
