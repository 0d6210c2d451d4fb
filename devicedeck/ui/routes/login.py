"""GET/POST /login and POST /logout: a token pasted once starts a server-side session, whose
random id (never the token) is kept in an HttpOnly cookie; signing out ends it everywhere."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from devicedeck.clock import utcnow
from devicedeck.config import AuthMode
from devicedeck.credentials.dashboard_sessions import end_session, start_session
from devicedeck.credentials.tokens import Principal, authenticate
from devicedeck.db import write_session
from devicedeck.ui.access import safe_next
from devicedeck.ui.render import base_context, environment, full_page, render_error
from devicedeck.ui.security import CSRF_FIELD, csrf_matches, same_origin, secure_cookies
from devicedeck.web.principal import LEGACY_TOKEN_COOKIE, SESSION_COOKIE, session_limits
from devicedeck.web.state import service_state

router = APIRouter(include_in_schema=False)

FORM_LIMIT = 16 * 1024


def _auth_on(request: Request) -> bool:
    return bool(request.app.state.settings.auth is AuthMode.TOKEN)


def _login_page(
    request: Request, next_path: str, status: int = 200, problem: dict[str, str] | None = None
) -> HTMLResponse:
    context: dict[str, Any] = {
        **base_context(request, None),
        "title": "Sign in",
        "nav": "",
        "next": next_path,
        "problem": problem,
        "arrived_cross_site": request.headers.get("sec-fetch-site") == "cross-site",
    }
    return full_page(request, environment(request), "login.html", context, status=status)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> Response:
    next_path = safe_next(request.query_params.get("next"))
    # With auth off the page still signs in: an admin token is what the forms that change
    # things (advertising a resource) need.
    return _login_page(request, next_path)


def refuse_cross_site(request: Request, form: dict[str, str]) -> Response | None:
    if same_origin(request) and csrf_matches(request, form.get(CSRF_FIELD)):
        return None
    return render_error(
        request,
        403,
        "Request refused",
        "This form was not sent from a Devicedeck page (its origin or its form token does "
        "not match), so nothing was changed. Reload the page and try again.",
        back="/",
    )


async def read_form(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > FORM_LIMIT:
        return {}
    parsed = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {key: values[-1] for key, values in parsed.items()}


def _check_token(request: Request, token: str) -> Principal | None:
    with service_state(request.app).session_factory() as session:
        found = authenticate(session, token, utcnow())
    return found.principal if found is not None else None


def _start_session(request: Request, token_id: int) -> str:
    state = service_state(request.app)
    with write_session(state.session_factory) as session:
        return start_session(session, token_id, utcnow(), session_limits(state.settings))


def _end_session(request: Request, session_id: str) -> None:
    with write_session(service_state(request.app).session_factory) as session:
        end_session(session, session_id, utcnow())


def _forget_cookies(request: Request, response: Response, *names: str) -> None:
    for name in names:
        response.delete_cookie(
            name, httponly=True, samesite="strict", secure=secure_cookies(request), path="/"
        )


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    form = await read_form(request)
    refused = refuse_cross_site(request, form)
    if refused is not None:
        return refused
    next_path = safe_next(form.get("next"))
    token = form.get("token", "").strip()
    if not token:
        problem = {"field": "token", "rule": "required", "message": "Paste an API token."}
        return _login_page(request, next_path, 422, problem)
    principal = await run_in_threadpool(_check_token, request, token)
    if principal is None:
        problem = {
            "field": "token",
            "rule": "known_token",
            "message": "That token is unknown or has been revoked.",
        }
        return _login_page(request, next_path, 401, problem)
    if not principal.has("read"):
        problem = {
            "field": "token",
            "rule": "read_scope",
            "message": f"The token “{principal.name}” lacks the read scope.",
        }
        return _login_page(request, next_path, 403, problem)
    assert principal.token_id is not None  # a token from the database always has its id
    session_id = await run_in_threadpool(_start_session, request, principal.token_id)
    response = RedirectResponse(next_path, status_code=303)
    _forget_cookies(request, response, LEGACY_TOKEN_COOKIE)
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        # The browser drops the cookie when the session could not be used anyway.
        max_age=int(service_state(request.app).settings.session_max_age_seconds),
        httponly=True,
        samesite="strict",
        secure=secure_cookies(request),
        path="/",
    )
    return response


@router.post("/logout", response_class=HTMLResponse)
async def logout(request: Request) -> Response:
    form = await read_form(request)
    refused = refuse_cross_site(request, form)
    if refused is not None:
        return refused
    session_id = request.cookies.get(SESSION_COOKIE)
    if session_id:
        await run_in_threadpool(_end_session, request, session_id)
    response = RedirectResponse("/login" if _auth_on(request) else "/", status_code=303)
    _forget_cookies(request, response, SESSION_COOKIE, LEGACY_TOKEN_COOKIE)
    return response
