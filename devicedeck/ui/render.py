"""Turning a page's data into a response: the full page, one region, or a live refresh.

A page is a template plus named regions (templates/regions/NAME.html, DOM id NAME). htmx asks
for a region by targeting its id; the live refresher (DOM id "live") asks for every region and
gets back, as out-of-band swaps, only those whose content changed since the browser got them:
each region carries a digest of its content in a hidden `v-NAME` input that the refresher
sends along. A pushed URL, a history restore and a plain load always get the full page.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment
from markupsafe import Markup

from devicedeck.clock import utcnow
from devicedeck.config import AuthMode
from devicedeck.credentials.tokens import ANONYMOUS_READER, Principal
from devicedeck.ui.security import CSRF_FIELD, csrf_token, set_csrf_cookie
from devicedeck.web.state import service_state

LIVE_TARGET = "live"
HISTORY_HEADER = "devicedeck-history"
VARY = "HX-Request, HX-Target, HX-History-Restore-Request"
PAGE_HEADERS = {"Vary": VARY, "Cache-Control": "no-store"}


@dataclass
class View:
    """What a route hands over: the page, its data, its regions, and its canonical URL."""

    template: str
    context: dict[str, Any]
    title: str
    nav: str
    regions: tuple[str, ...] = ()
    canonical: str | None = None
    status: int = 200


def environment(request: Request) -> Environment:
    env: Environment = request.app.state.ui_templates
    return env


def is_fragment_request(request: Request) -> bool:
    return (
        request.headers.get("hx-request") == "true"
        and request.headers.get("hx-history-restore-request") != "true"
    )


def region_requested(request: Request, name: str) -> bool:
    """Whether this request renders region NAME on its own: asked for directly, or as part of
    a live refresh. Pages use it to put off expensive regions on the first load."""
    if not is_fragment_request(request):
        return False
    return request.headers.get("hx-target") in (name, LIVE_TARGET)


def digest(html: str) -> str:
    return hashlib.sha256(html.encode()).hexdigest()[:16]


def wrap_region(name: str, html: str, *, oob: bool = False) -> Markup:
    swap = ' hx-swap-oob="true"' if oob else ""
    return Markup(
        f'<div id="{name}" class="region"{swap}>{html}'
        f'<input type="hidden" class="live-v" name="v-{name}" value="{digest(html)}"></div>'
    )


def render_region(env: Environment, name: str, context: dict[str, Any]) -> str:
    return env.get_template(f"regions/{name}.html").render(context)


def base_context(request: Request, principal: Principal | None) -> dict[str, Any]:
    settings = service_state(request.app).settings
    # None until the live-update task has started (and in apps without a lifespan).
    hub = request.app.state.live
    since = hub.latest if hub is not None else 0
    token, _ = csrf_token(request)
    return {
        "principal": principal,
        "auth_on": settings.auth is AuthMode.TOKEN,
        # With auth off a visitor reads without a token, and signs in only to act as admin.
        "signed_in": principal is not None and principal is not ANONYMOUS_READER,
        "csrf_field": CSRF_FIELD,
        "csrf_token": token,
        "stream_url": f"/ui/stream?since={since}",
        "path": request.url.path,
        "now": utcnow(),
    }


def respond(request: Request, principal: Principal, view: View) -> Response:
    env = environment(request)
    context = {**base_context(request, principal), **view.context, "title": view.title}
    context["nav"] = view.nav
    if is_fragment_request(request):
        target = request.headers.get("hx-target")
        if target == LIVE_TARGET:
            return _live_refresh(request, env, view, context)
        if target in view.regions:
            html = render_region(env, target, context)
            response = HTMLResponse(
                wrap_region(target, html), status_code=view.status, headers=PAGE_HEADERS
            )
            # Filters, sorting and paging push their URL; a region loading itself after the
            # page (its trigger's id ends in -loader) does not.
            loader = request.headers.get("hx-trigger", "").endswith("-loader")
            if view.canonical is not None and view.status < 400 and not loader:
                # Typing on in the same box (the script says so) replaces the history entry
                # its first keystroke added, so Back leaves the search instead of untyping it.
                typing_on = request.headers.get(HISTORY_HEADER) == "replace"
                history = "HX-Replace-Url" if typing_on else "HX-Push-Url"
                response.headers[history] = view.canonical
            return response
    return full_page(request, env, view.template, context, view.regions, view.status)


def full_page(
    request: Request,
    env: Environment,
    template: str,
    context: dict[str, Any],
    regions: tuple[str, ...] = (),
    status: int = 200,
) -> HTMLResponse:
    def region(name: str) -> Markup:
        assert name in regions, f"{name} is not a region of {template}"
        return wrap_region(name, render_region(env, name, context))

    html = env.get_template(template).render({**context, "region": region, "live": bool(regions)})
    response = HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)
    token, new = csrf_token(request)
    if new:
        set_csrf_cookie(response, request, token)
    return response


def _live_refresh(
    request: Request, env: Environment, view: View, context: dict[str, Any]
) -> Response:
    changed = []
    for name in view.regions:
        html = render_region(env, name, context)
        if request.query_params.get(f"v-{name}") != digest(html):
            changed.append(wrap_region(name, html, oob=True))
    if not changed:
        return Response(status_code=204, headers=PAGE_HEADERS)
    return HTMLResponse("".join(changed), headers=PAGE_HEADERS)


def render_error(
    request: Request,
    status: int,
    heading: str,
    message: str,
    *,
    principal: Principal | None = None,
    problems: list[dict[str, str]] | None = None,
    back: str | None = None,
) -> HTMLResponse:
    env = environment(request)
    context = {
        **base_context(request, principal),
        "title": heading,
        "nav": "",
        "heading": heading,
        "message": message,
        "problems": problems or [],
        "back": back,
        "status": status,
    }
    return full_page(request, env, "error.html", context, status=status)
