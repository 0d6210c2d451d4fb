"""The dashboard in a real Chromium: sign in, read the overview, filter devices, follow a
device and come back, and watch a change arrive live, with no console errors."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.config import AuthMode, Settings

from ..conftest import MakeToken
from ..seed import GPU, device, gpu_id, seed_cluster
from ..servers import threaded_server

pytest.importorskip("playwright")
from playwright.async_api import Page, async_playwright, expect

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
# A deadline for the change to arrive, not a speed target: generous for a busy machine.
LIVE_DEADLINE_MS = 60_000
# Every other expectation waits up to this long (Playwright's default is 5 s): each returns as
# soon as the page shows what it expects.
expect.set_options(timeout=30_000)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]


class Browser:
    """Console errors, page errors and requests of one page, gathered as they happen."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.problems: list[str] = []
        self.documents = 0
        self.live_pages = 0
        self.streams = 0
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        page.on("request", self._request)
        page.on("response", self._response)

    def _console(self, message: Any) -> None:
        if message.type in ("error", "warning"):
            self.problems.append(f"console {message.type}: {message.text}")

    def _response(self, response: Any) -> None:
        # Full dashboard pages (not the login page, not redirects) open an event stream.
        if response.request.resource_type == "document" and response.status == 200:
            self.live_pages += "/login" not in response.url

    def _request(self, request: Any) -> None:
        if request.resource_type == "document":
            self.documents += 1
        if "/ui/stream" in request.url:
            self.streams += 1


def result_rows(page: Page) -> Any:
    return page.locator("#device-results tbody tr")


async def scenario(base: str, token: str, shots: Path | None) -> Browser:
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            context = await chromium.new_context(viewport={"width": 1280, "height": 700})
            page = await context.new_page()
            seen = Browser(page)

            # Signing in: the overview redirects to the login page and back.
            await page.goto(base + "/")
            await expect(page).to_have_url(re.compile(r"/login\?next=%2F$"))
            await page.get_by_label("API token").fill(token)
            await page.get_by_role("button", name="Sign in").click()
            await expect(page).to_have_url(base + "/")
            await expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
            await expect(page.locator("#overview-resources tbody tr").first).to_contain_text(GPU)
            await expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
            if shots:
                await page.screenshot(path=str(shots / "overview.png"), full_page=True)

            # Filtering devices: the URL follows, and the table with it.
            await (
                page.get_by_role("navigation", name="Main")
                .get_by_role("link", name="Devices")
                .click()
            )
            await expect(page).to_have_url(base + "/devices")
            await page.get_by_label("Health").select_option("Unhealthy")
            await expect(page).to_have_url(re.compile(r"/devices\?health=Unhealthy$"))
            await expect(result_rows(page)).to_have_count(1)
            await page.get_by_label("Device ID contains").fill("GPU-02")
            await expect(page).to_have_url(
                re.compile(r"health=Unhealthy&q=GPU-02|q=GPU-02&health=Unhealthy")
            )
            filtered_url = page.url
            await expect(result_rows(page)).to_have_count(1)
            failing = gpu_id(2, 3)
            await expect(result_rows(page).first).to_contain_text(failing)

            # Back and forward between filter states of the same page (htmx restores them
            # from the server: the inputs follow the URL).
            await page.go_back()
            await expect(page).to_have_url(re.compile(r"/devices\?health=Unhealthy$"))
            await expect(page.get_by_label("Device ID contains")).to_have_value("")
            await expect(page.get_by_label("Health")).to_have_value("Unhealthy")
            await page.go_forward()
            await expect(page).to_have_url(filtered_url)
            await expect(page.get_by_label("Device ID contains")).to_have_value("GPU-02")
            await expect(result_rows(page)).to_have_count(1)

            # Following a device and coming back restores the URL, the filters and the rows.
            await page.get_by_role("link", name=failing).click()
            await expect(page).to_have_url(re.compile(r"/devices/\d+$"))
            await expect(page.locator("h1")).to_contain_text(failing)
            await expect(page.locator("#device-history")).to_contain_text("Health changed")
            await page.go_back()
            await expect(page).to_have_url(filtered_url)
            await expect(page.get_by_label("Health")).to_have_value("Unhealthy")
            await expect(page.get_by_label("Device ID contains")).to_have_value("GPU-02")
            await expect(result_rows(page)).to_have_count(1)
            await expect(page.locator("#live-status")).to_have_attribute("data-state", "open")

            # A change ingested elsewhere appears with no reload, keeping the
            # scroll position and the text being typed in the search box.
            await page.set_viewport_size({"width": 1280, "height": 320})
            await page.evaluate("window.scrollTo(0, 120)")
            search = page.get_by_label("Namespace")
            await search.focus()
            await search.press_sequentially("ml-training")
            await expect(page).to_have_url(re.compile(r"namespace=ml-training"))
            await expect(result_rows(page)).to_have_count(1)
            documents_before = seen.documents
            origin = await page.evaluate("performance.timeOrigin")
            gpus = [device(gpu_id(2, i), 0 if i < 4 else 1) for i in range(8)]
            for sick in (1, 3):
                gpus[sick] = device(gpu_id(2, sick), 0, "Unhealthy")
            post_snapshot(base, token, gpus)
            await expect(result_rows(page)).to_have_count(2, timeout=LIVE_DEADLINE_MS)
            assert await page.evaluate("performance.timeOrigin") == origin
            assert seen.documents == documents_before
            assert await page.evaluate("window.scrollY") == 120
            assert await search.input_value() == "ml-training"
            assert await page.evaluate("document.activeElement.id") == "f-namespace"
            if shots:
                await page.set_viewport_size({"width": 1280, "height": 900})
                await page.screenshot(path=str(shots / "devices.png"), full_page=True)
            await context.close()
            return seen
        finally:
            await chromium.close()


def post_snapshot(base: str, token: str, devices: list[dict[str, Any]]) -> None:
    body = {
        "node": "gpu-node-02",
        "resource": GPU,
        "source": {"boot_id": "browser-test", "seq": 1},
        "observed_at": utcnow().isoformat(),
        "devices": devices,
    }
    response = httpx.post(
        base + "/api/v1/ingest/listandwatch",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=5,
    )
    assert response.status_code == 200, response.text


def test_operator_filters_follows_a_device_and_sees_live_changes(
    database_url: str,
    session_factory: sessionmaker[Session],
    make_token: MakeToken,
    tmp_path: Path,
) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    seed_cluster(session_factory, utcnow(), nodes=4)
    token = make_token("read", "ingest", name="operator")
    settings = Settings(database_url=database_url, auth=AuthMode.TOKEN, stale_after=3600)
    with threaded_server(settings) as (base, _app):
        seen = asyncio.run(scenario(base, token, shots))
    assert seen.problems == []
    # One event stream per page load, none for the htmx swaps in between.
    assert seen.live_pages == 4 and seen.streams == seen.live_pages
