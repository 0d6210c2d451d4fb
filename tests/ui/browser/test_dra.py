"""DRA devices in a real Chromium: the DRA tab of the devices list, its filters, a DRA
device's page and the node page's DRA pool, with no console errors."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.config import AuthMode, Settings
from devicedeck.db import write_session
from devicedeck.kube import dra_sync, node_sync

from ..conftest import MakeToken
from ..servers import threaded_server
from .test_dashboard import CHROMIUM, CHROMIUM_ARGS, Browser

pytest.importorskip("playwright")
from playwright.async_api import async_playwright, expect

DRIVER = "gpu.example.com"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]


def _result(device: str, **extra: Any) -> dict[str, Any]:
    return {"request": "gpu", "driver": DRIVER, "pool": "dra-node", "device": device, **extra}


def seed_dra(factory: sessionmaker[Session]) -> None:
    """What the cluster watcher would store: a node with 3 DRA GPUs, one held by a training
    pod's claim and reported not ready by the driver, all watched by a monitor."""
    now = utcnow()
    slice_ = {
        "metadata": {"name": "dra-node-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "dra-node",
            "pool": {"name": "dra-node", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(3)],
        },
    }
    held = {
        "metadata": {"namespace": "ml", "name": "trainer-0-gpu", "uid": "uid-claim"},
        "status": {
            "allocation": {"devices": {"results": [_result("gpu-0")]}},
            "reservedFor": [{"resource": "pods", "name": "trainer-0", "uid": "uid-trainer-0"}],
            "devices": [
                {
                    "driver": DRIVER,
                    "pool": "dra-node",
                    "device": "gpu-0",
                    "conditions": [{"type": "Ready", "status": "False", "reason": "XidError"}],
                }
            ],
        },
    }
    monitor = {
        "metadata": {"namespace": "monitoring", "name": "gpu-monitor", "uid": "uid-monitor"},
        "status": {
            "allocation": {
                "devices": {"results": [_result(f"gpu-{i}", adminAccess=True) for i in range(3)]}
            }
        },
    }
    node = {"metadata": {"name": "dra-node", "labels": {}}, "status": {"capacity": {}}}
    with write_session(factory) as session:
        node_sync.apply_node_list(session, [node], now)
        dra_sync.apply_slice_list(session, [slice_], now)
        dra_sync.apply_claim_list(session, [held, monitor], now)


async def scenario(base: str, token: str) -> Browser:
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            context = await chromium.new_context(viewport={"width": 1280, "height": 800})
            page = await context.new_page()
            seen = Browser(page)
            await page.goto(base + "/devices")
            await page.get_by_label("API token").fill(token)
            await page.get_by_role("button", name="Sign in").click()
            await expect(page).to_have_url(base + "/devices")

            # The devices list has a DRA tab.
            await page.get_by_role("link", name="DRA (ResourceSlices)").click()
            await expect(page).to_have_url(base + "/dra")
            rows = page.locator("#dra-results tbody tr")
            await expect(rows).to_have_count(3)
            await expect(rows.first).to_contain_text("ml/trainer-0")
            await expect(rows.first).to_contain_text("Unhealthy")
            await page.get_by_label("Allocation").select_option("no")
            await expect(page).to_have_url(re.compile(r"/dra\?allocated=no$"))
            await expect(rows).to_have_count(2)
            await page.get_by_label("Allocation").select_option("")
            await expect(rows).to_have_count(3)

            # A DRA device's page: health with its source, the holder, the history.
            await page.get_by_role("link", name="gpu-0", exact=True).click()
            await expect(page).to_have_url(base + f"/dra/devices/{DRIVER}/dra-node/gpu-0")
            await expect(page.locator("h1")).to_contain_text("Unhealthy")
            await expect(page.locator("#dra-device-summary")).to_contain_text("ml/trainer-0")
            await expect(page.locator("#dra-device-summary")).to_contain_text("monitoring")
            await expect(page.locator("#dra-device-history")).to_contain_text("driver condition")

            # The node page has the pool, its devices as tiles.
            await page.get_by_role("link", name="dra-node").first.click()
            await expect(page).to_have_url(base + "/nodes/dra-node")
            pool = page.locator("#node-dra section")
            await expect(pool).to_contain_text(f"{DRIVER} pool dra-node")
            await expect(pool.locator("li.tile")).to_have_count(3)
            await context.close()
            return seen
        finally:
            await chromium.close()


def test_operator_finds_dra_devices_their_holders_and_health(
    database_url: str, session_factory: sessionmaker[Session], make_token: MakeToken
) -> None:
    seed_dra(session_factory)
    token = make_token("read", name="operator")
    settings = Settings(database_url=database_url, auth=AuthMode.TOKEN, stale_after=3600)
    with threaded_server(settings) as (base, _app):
        seen = asyncio.run(scenario(base, token))
    assert seen.problems == []
