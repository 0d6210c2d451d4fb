"""The watch list in a real Chromium: an admin marks a flaky GPU for return from its page with
a note, finds it on the Watch list page and in its CSV, follows it back and unmarks it."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.config import AuthMode, Settings

from ..conftest import MakeToken
from ..seed import gpu_id, seed_cluster
from ..servers import threaded_server
from .test_dashboard import CHROMIUM, CHROMIUM_ARGS, Browser

pytest.importorskip("playwright")
from playwright.async_api import async_playwright, expect

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]


async def mark_and_unmark(base: str, token: str, device_pk: int, device_id: str) -> Browser:
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            context = await chromium.new_context(viewport={"width": 1280, "height": 800})
            page = await context.new_page()
            seen = Browser(page)
            await page.goto(f"{base}/login?next=/devices/{device_pk}")
            await page.get_by_label("API token").fill(token)
            await page.get_by_role("button", name="Sign in").click()
            await expect(page).to_have_url(f"{base}/devices/{device_pk}")
            card = page.locator("section.watch")
            await expect(card).to_contain_text("Not marked for return.")

            await card.get_by_label("Note").fill("XID 79 three times this week")
            await card.get_by_role("button", name="Mark for return").click()
            await expect(page).to_have_url(f"{base}/devices/{device_pk}")
            await expect(card).to_contain_text("Marked for return")
            await expect(card).to_contain_text("by alice")
            await expect(card).to_contain_text("XID 79 three times this week")

            await (
                page.get_by_role("navigation", name="Main")
                .get_by_role("link", name="Watch list")
                .click()
            )
            await expect(page).to_have_url(f"{base}/watchlist")
            row = page.locator(".watchlist-table tbody tr")
            await expect(row).to_have_count(1)
            await expect(row).to_contain_text(device_id)
            await expect(row).to_contain_text("XID 79 three times this week")
            export = await page.get_by_role("link", name="Export CSV").get_attribute("href")
            assert export is not None
            csv = await page.request.get(base + export)
            assert csv.ok and device_id in await csv.text()

            await row.get_by_role("link", name=device_id).click()
            await expect(page).to_have_url(re.compile(rf"/devices/{device_pk}$"))
            await card.get_by_role("button", name="Take off the watch list").click()
            await expect(card).to_contain_text("Not marked for return.")
            await page.goto(f"{base}/watchlist")
            await expect(page.locator(".empty-title")).to_have_text(
                "No device is marked for return"
            )
            await context.close()
            return seen
        finally:
            await chromium.close()


def test_an_admin_marks_a_flaky_gpu_for_return_and_takes_it_off_again(
    database_url: str, session_factory: sessionmaker[Session], make_token: MakeToken
) -> None:
    seed_cluster(session_factory, utcnow(), nodes=4)
    token = make_token("read", "admin", name="alice")
    settings = Settings(database_url=database_url, auth=AuthMode.TOKEN, stale_after=3600)
    failing = gpu_id(2, 3)
    with threaded_server(settings) as (base, _app):
        found = httpx.get(
            f"{base}/api/v1/devices",
            params={"q": failing},
            headers={"Authorization": f"Bearer {token}"},
        ).json()["results"]
        [pk] = [d["id"] for d in found if d["device_id"] == failing]
        seen = asyncio.run(mark_and_unmark(base, token, pk, failing))
    assert seen.problems == []
