"""POST /nodes/{name}/extended-resources: set or remove a hand-advertised extended resource.

The same domain call as the admin API (`change_extended_resource`), so the page sends exactly
the documented JSON patch and records who did it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from devicedeck.inventory.errors import DomainError, InvalidInput, Problem
from devicedeck.kube.extended_admin import change_extended_resource
from devicedeck.ui.access import Viewer
from devicedeck.ui.render import render_error
from devicedeck.ui.routes.login import read_form, refuse_cross_site
from devicedeck.web.errors import status_of
from devicedeck.web.state import service_state

router = APIRouter(include_in_schema=False)

ACTIONS = ("set", "remove")


def _quantity(form: dict[str, str]) -> int:
    text = form.get("quantity", "").strip()
    if not text.isdigit():
        raise InvalidInput(
            "quantity must be a whole number",
            [Problem("quantity", "integer", "must be a whole number of 0 or more")],
        )
    return int(text)


@router.post("/nodes/{name}/extended-resources", response_class=HTMLResponse)
async def change_advertised_resource(name: str, request: Request, viewer: Viewer) -> Response:
    form = await read_form(request)
    refused = refuse_cross_site(request, form)
    if refused is not None:
        return refused
    back = f"/nodes/{name}"
    if not viewer.has("admin"):
        return render_error(
            request,
            403,
            "Admin scope needed",
            f"{'The user' if viewer.proxy_user else 'The token'} “{viewer.name}” lacks the "
            "admin scope, so nothing was changed.",
            principal=viewer,
            back=back,
        )
    action = form.get("action", "")
    resource = form.get("resource", "").strip()
    try:
        if action not in ACTIONS:
            raise InvalidInput(
                "unknown action", [Problem("action", "enum", "must be set or remove")]
            )
        quantity = _quantity(form) if action == "set" else None
        await run_in_threadpool(_change, request, name, resource, quantity, viewer.name)
    except DomainError as e:
        return render_error(
            request,
            status_of(e),
            "Not changed",
            e.message,
            principal=viewer,
            problems=[p.as_dict() for p in e.problems],
            back=back,
        )
    return RedirectResponse(back, status_code=303)


def _change(
    request: Request, node: str, resource: str, quantity: int | None, actor: str
) -> dict[str, Any]:
    state = service_state(request.app)
    return change_extended_resource(
        state.kube_api,
        state.kube_problem,
        state.session_factory,
        node=node,
        resource=resource,
        quantity=quantity,
        actor=actor,
    )
