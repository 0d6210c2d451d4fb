"""Who may see the pages: the service's own token check, with a login page instead of a 401.

The caller is found as the JSON API finds it: a bearer header, or the `devicedeck_session`
cookie the login page sets (a session id, never a token).
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import RedirectResponse, Response

from devicedeck.config import AuthMode, Settings
from devicedeck.credentials.tokens import ANONYMOUS_READER, Principal
from devicedeck.ui.render import render_error
from devicedeck.web.caller_first import checked_before_body
from devicedeck.web.principal import current_principal


class LoginRequired(Exception):
    """No valid token: send the browser to the login page."""


class ReadScopeMissing(Exception):
    def __init__(self, principal: Principal) -> None:
        super().__init__(principal.name)
        self.principal = principal


@checked_before_body
async def page_principal(request: Request) -> Principal:
    settings: Settings = request.app.state.settings
    try:
        principal = await current_principal(request)
    except HTTPException as e:
        if e.status_code != 401:
            raise
        if settings.auth is AuthMode.OFF:
            # A stale cookie from an earlier sign-in: the page is still open to read.
            return ANONYMOUS_READER
        raise LoginRequired() from e
    if not principal.has("read"):
        raise ReadScopeMissing(principal)
    return principal


Viewer = Annotated[Principal, Depends(page_principal)]


def safe_next(value: str | None) -> str:
    """A local path to return to after login; anything else (other hosts, //x) becomes /."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    if any(ord(ch) < 32 for ch in value):
        return "/"
    return value


def login_redirect(request: Request) -> Response:
    target = request.url.path
    if request.url.query:
        target += "?" + request.url.query
    location = "/login?next=" + quote(safe_next(target), safe="")
    vary = {"Vary": "HX-Request"}
    if request.headers.get("hx-request") == "true":
        # htmx follows HX-Redirect with a full page load; a 303 would be swapped in place.
        return Response(status_code=204, headers={"HX-Redirect": location, **vary})
    return RedirectResponse(location, status_code=303, headers=vary)


def install_access_handlers(app: FastAPI) -> None:
    @app.exception_handler(LoginRequired)
    async def _login(request: Request, _exc: LoginRequired) -> Response:
        if request.url.path.startswith("/ui/stream"):
            return Response("a token with the read scope is required", status_code=401)
        return login_redirect(request)

    @app.exception_handler(ReadScopeMissing)
    async def _forbidden(request: Request, exc: ReadScopeMissing) -> Response:
        return render_error(
            request,
            403,
            "This token cannot read the inventory",
            f"The token “{exc.principal.name}” lacks the read scope. Sign in with a token "
            "that has it.",
            principal=exc.principal,
        )
