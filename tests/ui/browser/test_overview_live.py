"""The overview in a real Chromium: once its charts arrive, and after changes come over the
event stream (plugin devices and DRA devices), every region shows the same moment."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.config import AuthMode, Settings
from devicedeck.db import write_session
from devicedeck.kube import dra_sync

from ..conftest import GPU, Ingest, MakeToken, dev, held
from ..dom import parse
from ..overview_checks import Overview, check_one_picture, dra_card, read_overview
from ..servers import threaded_server
from ..test_overview_picture import DRIVER, _claim, troubled_cluster
from .test_dashboard import CHROMIUM, CHROMIUM_ARGS, LIVE_DEADLINE_MS, Browser

pytest.importorskip("playwright")
from playwright.async_api import Page, async_playwright, expect

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]


async def picture(page: Page) -> Overview:
    return read_overview(parse(await page.content()))


async def scenario(
    base: str, token: str, ingest: Ingest, factory: sessionmaker[Session]
) -> Browser:
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            context = await chromium.new_context(viewport={"width": 1280, "height": 900})
            page = await context.new_page()
            seen = Browser(page)
            await page.goto(base + "/")
            await page.get_by_label("API token").fill(token)
            await page.get_by_role("button", name="Sign in").click()
            await expect(page).to_have_url(base + "/")
            # The charts come after the page, with every region of their moment.
            await expect(page.locator("#overview-trends figure").first).to_be_visible()
            await expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
            check_one_picture(await picture(page), charts=True)

            # Changes arrive over the stream: a GPU fails and a pod lets go of one...
            unhealthy = page.locator("a.kpi-unhealthy .kpi-value")
            await expect(unhealthy).to_have_text("1")
            gpus = [dev("gpu-0", "Unhealthy"), dev("gpu-1"), dev("gpu-2", "Unhealthy")]
            await asyncio.to_thread(ingest.devices, "node-a", gpus)
            await asyncio.to_thread(
                ingest.pods, "node-a", [held("ml", "trainer-0", "main", GPU, "gpu-0")]
            )
            await expect(unhealthy).to_have_text("2", timeout=LIVE_DEADLINE_MS)
            allocated = page.locator("a.kpi-allocated .kpi-value")
            await expect(allocated).to_have_text("3", timeout=LIVE_DEADLINE_MS)
            now = await picture(page)
            check_one_picture(now, charts=True)
            assert now.chart_now[GPU] == (1, 1, 5)

            # ...and a driver reports the other DRA GPU of node-a broken.
            with write_session(factory) as session:
                dra_sync.apply_claim_list(
                    session,
                    [
                        _claim("trainer-dra", "node-a", "dgpu-0", ready=False),
                        _claim("fabric-user", "fabric", "link-0", ready=False),
                        _claim("second-dra", "node-a", "dgpu-1", ready=False),
                    ],
                    utcnow(),
                )
            dra = page.locator("a.kpi-dra .kpi-note")
            await expect(dra).to_contain_text("3 unhealthy", timeout=LIVE_DEADLINE_MS)
            later = await picture(page)
            check_one_picture(later, charts=True)
            assert dra_card(later)["unhealthy"] == 3
            assert later.dra_unhealthy[("node-a", DRIVER, "node-a")] == 2
            await context.close()
            return seen
        finally:
            await chromium.close()


def test_every_region_shows_one_moment_after_live_changes(
    database_url: str, session_factory: sessionmaker[Session], make_token: MakeToken
) -> None:
    token = make_token("read", "ingest", name="operator")
    settings = Settings(database_url=database_url, auth=AuthMode.TOKEN, stale_after=3600)
    with threaded_server(settings) as (base, _app), httpx.Client(base_url=base) as http:
        ingest = Ingest(http, {"Authorization": f"Bearer {token}"})
        troubled_cluster(ingest, session_factory)
        seen = asyncio.run(scenario(base, token, ingest, session_factory))
    assert seen.problems == []
