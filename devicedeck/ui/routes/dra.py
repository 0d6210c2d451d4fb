"""GET /dra (DRA devices, filterable and paged) and the page of one DRA device."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from devicedeck.inventory.dra.devices import DraFilters, list_dra_devices
from devicedeck.inventory.dra.history import dra_device_details
from devicedeck.inventory.fields import NAME_MAX
from devicedeck.ui.access import Viewer
from devicedeck.ui.forms import Form
from devicedeck.ui.lists import list_page
from devicedeck.ui.render import View, render_error, respond
from devicedeck.web.db_sessions import ReadSession

router = APIRouter(include_in_schema=False)

ALLOCATED_CHOICES: dict[str, bool | None] = {"": None, "yes": True, "no": False}
HEALTH_CHOICES = {"": None, "Healthy": "Healthy", "Unhealthy": "Unhealthy", "Unknown": "Unknown"}
FILTERS = ("node", "driver", "pool", "allocated", "health")


@router.get("/dra", response_class=HTMLResponse)
def dra_devices(request: Request, viewer: Viewer, session: ReadSession) -> Response:
    form = Form(request.query_params)
    filters = DraFilters(
        node=form.text("node"),
        driver=form.text("driver"),
        pool=form.text("pool"),
        allocated=form.choice("allocated", ALLOCATED_CHOICES),
        health=form.choice("health", HEALTH_CHOICES),
    )
    view = list_page(
        form,
        lambda cursor, limit: list_dra_devices(session, filters, cursor=cursor, limit=limit),
        filters=FILTERS,
        template="dra.html",
        path="/dra",
        title="DRA devices",
        region="dra-results",
    )
    # DRA devices are devices: the navigation keeps the Devices tab lit.
    view.nav = "devices"
    return respond(request, viewer, view)


@router.get("/dra/devices/{driver}/{pool:path}/{device}", response_class=HTMLResponse)
def dra_device(
    driver: str, pool: str, device: str, request: Request, viewer: Viewer, session: ReadSession
) -> Response:
    details = (
        dra_device_details(session, driver, pool, device)
        if max(len(driver), len(pool), len(device)) <= NAME_MAX
        else None
    )
    if details is None:
        return render_error(
            request,
            404,
            "No such DRA device",
            f"No driver has published “{driver}/{pool}/{device}”, now or before.",
            principal=viewer,
            back="/dra",
        )
    return respond(
        request,
        viewer,
        View(
            "dra-device.html",
            {"device": details},
            title=f"{device} in {driver}/{pool}",
            nav="devices",
            regions=("dra-device-summary", "dra-device-history"),
        ),
    )
