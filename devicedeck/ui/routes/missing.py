"""Whatever no other route answers: the HTML 404 page for a browser, JSON under /api.

Included after every other router, so it only sees paths nothing else matched. The page
needs no sign-in: it shows nothing but the path asked for.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, Response
from starlette.exceptions import HTTPException
from starlette.routing import Match

from devicedeck.ui.render import render_error
from devicedeck.ui.templating import STATIC

router = APIRouter(include_in_schema=False)
# Paths that belong to the JSON API or machinery, never to the dashboard.
NOT_PAGES = ("/api/", "/static/", "/ui/")


@router.get("/favicon.ico")
def favicon() -> Response:
    """Browsers ask for it on pages that name no icon (the API's JSON, for one)."""
    return FileResponse(
        STATIC / "favicon.svg",
        media_type="image/svg+xml",
        headers={"Cache-Control": "public, max-age=86400"},
    )


@router.api_route(
    "/{path:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
)
def not_found(path: str, request: Request) -> Response:
    if _other_route_takes_other_methods(request):
        # The path exists, for other methods: the answer is 405, as if this route were not here.
        raise HTTPException(405)
    if request.method not in ("GET", "HEAD") or f"/{path}".startswith(NOT_PAGES) or path == "api":
        raise HTTPException(404)
    return render_error(
        request,
        404,
        "Page not found",
        "There is no page at this address. It may have come from an old link.",
        back="/",
    )


def _other_route_takes_other_methods(request: Request) -> bool:
    scope = {**request.scope, "path_params": {}}
    for route in request.app.router.routes:
        if route is router or getattr(route, "original_router", None) is router:
            continue
        match, _ = route.matches(scope)
        if match is Match.PARTIAL:
            return True
    return False
