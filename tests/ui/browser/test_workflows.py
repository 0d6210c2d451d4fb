"""Operator workflows in a real Chromium, each on the seeded demo cluster: "did this pod run on
a bad GPU?", an incident's events exported, times in UTC or local, unknown paths, the API docs
offline."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.config import AuthMode, Settings

from ..seed import gpu_id, seed_cluster
from ..servers import threaded_server
from .test_dashboard import CHROMIUM, CHROMIUM_ARGS, Browser

pytest.importorskip("playwright")
from playwright.async_api import Page, async_playwright, expect

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]

Steps = Callable[[Page, str], Awaitable[None]]


def run_in_browser(
    database_url: str,
    session_factory: sessionmaker[Session],
    steps: Steps,
    viewport: tuple[int, int] = (1280, 800),
    timezone: str = "UTC",
    settings_changes: dict[str, Any] | None = None,
) -> Browser:
    """Seeds the demo cluster, serves it, and runs `steps` in a fresh Chromium page."""
    seed_cluster(session_factory, utcnow(), nodes=4)
    settings = Settings(
        database_url=database_url, auth=AuthMode.OFF, stale_after=3600, **(settings_changes or {})
    )

    async def drive(base: str) -> Browser:
        async with async_playwright() as playwright:
            chromium = await playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
            )
            try:
                context = await chromium.new_context(
                    viewport={"width": viewport[0], "height": viewport[1]},
                    timezone_id=timezone,
                    permissions=["clipboard-read", "clipboard-write"],
                )
                page = await context.new_page()
                seen = Browser(page)
                await steps(page, base)
                await context.close()
                return seen
            finally:
                await chromium.close()

    with threaded_server(settings) as (base, _app):
        return asyncio.run(drive(base))


def test_operator_finds_the_pod_that_ran_on_a_failing_gpu(
    database_url: str, session_factory: sessionmaker[Session]
) -> None:
    failing = gpu_id(2, 3)

    async def steps(page: Page, base: str) -> None:
        # From the node page to the pod holding the failed GPU.
        await page.goto(base + "/nodes/gpu-node-02")
        await (
            page.locator("#node-side")
            .get_by_role("link", name="ml-training/trainer-2-22-3")
            .click()
        )
        await expect(page).to_have_url(base + "/pods/ml-training/trainer-2-22-3")
        await expect(page.locator("h1")).to_contain_text("ml-training/trainer-2-22-3")
        verdict = page.locator(".verdict")
        await expect(verdict).to_contain_text("A device was unhealthy while this pod held it")
        await expect(verdict).to_contain_text(failing)
        await expect(page.locator(".pod-timeline rect.st-unhealthy")).to_have_count(1)
        await expect(page.locator(".holds-table tr.row-bad")).to_contain_text(
            "Unhealthy while held"
        )
        # The device's page links back to the pod through its allocation history.
        await page.locator(".holds-table").get_by_role("link", name=failing).click()
        await expect(page).to_have_url(re.compile(r"/devices/\d+$"))
        await (
            page.locator("#device-history")
            .get_by_role("link", name="ml-training/trainer-2-22-3")
            .click()
        )
        await expect(page).to_have_url(base + "/pods/ml-training/trainer-2-22-3")
        # A pod that finished hours ago on a healthy GPU keeps its page.
        await page.goto(base + "/events?kind=released&node=gpu-node-01")
        await page.locator("#event-results a[href^='/pods/']").first.click()
        await expect(page.locator("h1")).to_contain_text("Finished")
        await expect(page.locator(".verdict")).to_contain_text("No device was unhealthy")

    seen = run_in_browser(database_url, session_factory, steps)
    assert seen.problems == []


def test_operator_finds_a_finished_pod_from_the_pods_list(
    database_url: str, session_factory: sessionmaker[Session]
) -> None:
    async def steps(page: Page, base: str) -> None:
        await page.goto(base + "/pods")
        results = page.locator("#pod-results")
        await expect(results.locator(".pod-state .tag-info").first).to_have_text("Running")
        await page.locator("#f-state").select_option("finished")
        await expect(page).to_have_url(re.compile(r"/pods\?state=finished$"))
        await expect(results.locator(".pod-state .tag-info")).to_have_count(0)
        finished = results.locator(".pod-state .tag-neutral")
        await expect(finished.first).to_have_text("Finished")
        await results.locator("a.pod-name").first.click()
        await expect(page).to_have_url(re.compile(r"/pods/[^/]+/[^/]+$"))
        await expect(page.locator("h1")).to_contain_text("Finished")
        await expect(page.locator(".verdict")).to_be_visible()

    seen = run_in_browser(database_url, session_factory, steps)
    assert seen.problems == []


def test_unknown_paths_show_the_404_page_with_an_icon(
    database_url: str, session_factory: sessionmaker[Session]
) -> None:
    async def steps(page: Page, base: str) -> None:
        for path in ("/nope", "/pods/ml/nobody", "/devices/1/extra"):
            response = await page.goto(base + path)
            assert response is not None and response.status == 404
            await expect(page.locator("h1")).to_have_text(re.compile("Page not found|No such pod"))
            await expect(page.locator("#main").get_by_role("link", name="Overview")).to_be_visible()
        icon = await page.request.get(base + "/favicon.ico")
        assert icon.status == 200 and icon.headers["content-type"].startswith("image/svg")

    seen = run_in_browser(database_url, session_factory, steps)
    # The browser logs each 404 document it loads; nothing else may show up.
    assert [p for p in seen.problems if "404" not in p] == []


def test_operator_narrows_events_to_an_incident_and_exports_them(
    database_url: str, session_factory: sessionmaker[Session]
) -> None:
    failing = gpu_id(2, 3)

    async def steps(page: Page, base: str) -> None:
        await page.goto(base + "/events")
        await page.get_by_label("Device ID").fill(failing)
        await expect(page).to_have_url(re.compile(r"device_id=GPU-0203"))
        await page.get_by_label("Since").fill("6h")
        await expect(page).to_have_url(re.compile(r"since=6h"))
        rows = page.locator("#event-results tbody tr")
        await expect(rows.first).to_contain_text("Health changed")
        shown = await rows.count()
        async with page.expect_download() as info:
            await page.get_by_role("link", name="Export CSV").click()
        download = await info.value
        text = Path(await download.path()).read_text()
        lines = text.strip().splitlines()
        assert lines[0].startswith("id,at,kind,node")
        assert len(lines) - 1 == shown and all(failing in line for line in lines[1:])

    seen = run_in_browser(database_url, session_factory, steps)
    assert seen.problems == []


def test_times_switch_between_utc_and_the_browsers_zone_and_stay_switched(
    database_url: str, session_factory: sessionmaker[Session]
) -> None:
    async def steps(page: Page, base: str) -> None:
        await page.goto(base + "/events?kind=health_changed")
        first = page.locator("#event-results tbody tr time").first
        await expect(first).to_contain_text("UTC")
        await expect(page.locator("#zone-switch")).to_contain_text("UTC")
        await page.locator("#zone-switch").click()
        await expect(first).to_contain_text(re.compile(r"GMT\+5:30|IST"))
        await expect(page.locator("#zone-switch")).to_have_attribute("aria-pressed", "true")
        # Remembered: the overview's charts follow the choice and name the zone.
        await page.goto(base + "/")
        kolkata = re.compile(r"Times in Asia/(Kolkata|Calcutta)")  # the zone's two names
        await expect(page.locator("[data-zone-label]")).to_have_text(kolkata)
        tick = page.locator(".chart text[data-time]").first
        iso = await tick.get_attribute("data-time")
        assert iso is not None
        await expect(tick).to_have_text(await local_clock(page, iso))
        tooltip = page.locator(".chart rect.hover title").first
        await expect(tooltip).to_contain_text(re.compile(r"GMT\+5:30|IST"))
        await page.locator("#zone-switch").click()
        await expect(page.locator("[data-zone-label]")).to_have_text("Times in UTC")

    seen = run_in_browser(database_url, session_factory, steps, timezone="Asia/Kolkata")
    assert seen.problems == []


async def local_clock(page: Page, iso: str) -> str:
    """HH:MM of a moment in the page's zone, as the browser writes it."""
    text: str = await page.evaluate(
        "(iso) => new Intl.DateTimeFormat(undefined, {hour: '2-digit', minute: '2-digit',"
        " hourCycle: 'h23'}).format(new Date(iso))",
        iso,
    )
    return text


def test_api_docs_render_without_internet_access(
    database_url: str, session_factory: sessionmaker[Session]
) -> None:
    outside: list[str] = []

    async def steps(page: Page, base: str) -> None:
        async def only_local(route: Any) -> None:
            if route.request.url.startswith(base):
                await route.continue_()
            else:
                outside.append(route.request.url)
                await route.abort()

        await page.route("**/*", only_local)
        await page.goto(base + "/docs")
        await expect(page.locator(".swagger-ui .info .title")).to_contain_text("Devicedeck")
        await expect(page.locator(".opblock-summary-path").first).to_be_visible()

    run_in_browser(database_url, session_factory, steps)
    assert outside == []


def test_typing_filters_keeps_one_history_entry_per_box(
    database_url: str, session_factory: sessionmaker[Session]
) -> None:
    async def steps(page: Page, base: str) -> None:
        await page.goto(base + "/devices")
        rows = page.locator("#device-results tbody tr")
        await page.get_by_label("Node").press_sequentially("gpu-node-0", delay=120)
        await expect(page).to_have_url(re.compile(r"node=gpu-node-0$"))
        await expect(rows).to_have_count(39)  # a prefix: every node, GPUs and QAT devices
        await page.get_by_label("Device ID contains").press_sequentially("GPU-02", delay=120)
        await expect(page).to_have_url(re.compile(r"q=GPU-02"))
        await expect(rows).to_have_count(8)
        await page.get_by_role("link", name="Health since").click()
        await expect(page).to_have_url(re.compile(r"sort=health_since"))
        # The address changes before the new list is in place: Back is pressed once it is.
        await expect(rows).to_have_count(8)
        await expect(page.locator(".htmx-request, .htmx-swapping, .htmx-settling")).to_have_count(0)
        # Back undoes one thing at a time: the sort, the device ID typed, the node typed.
        await page.go_back()
        await expect(page).to_have_url(re.compile(r"node=gpu-node-0&q=GPU-02$"))
        await page.go_back()
        await expect(page).to_have_url(re.compile(r"/devices\?node=gpu-node-0$"))
        await expect(page.get_by_label("Device ID contains")).to_have_value("")
        await page.go_back()
        await expect(page).to_have_url(base + "/devices")
        await expect(rows).to_have_count(39)

    seen = run_in_browser(database_url, session_factory, steps)
    assert seen.problems == []


def test_operator_copies_kubectl_commands_and_follows_the_device_link(
    database_url: str, session_factory: sessionmaker[Session]
) -> None:
    failing = gpu_id(2, 3)
    template = "https://grafana.example/d/gpu?var-node={node}&var-uuid={device_id}&r={resource}"

    async def steps(page: Page, base: str) -> None:
        await page.goto(base + "/nodes/gpu-node-02")
        drain = "kubectl drain gpu-node-02 --ignore-daemonsets --delete-emptydir-data"
        await expect(page.locator(".commands")).to_contain_text(drain)
        await page.get_by_role("button", name="Copy: kubectl cordon gpu-node-02").click()
        copied = await page.evaluate("navigator.clipboard.readText()")
        assert copied == "kubectl cordon gpu-node-02"
        await page.goto(base + f"/devices?q={failing}")
        await page.get_by_role("link", name=failing).click()
        await expect(page.locator(".commands")).to_contain_text(
            "kubectl describe pod trainer-2-22-3 -n ml-training"
        )
        link = page.get_by_role("link", name="Open elsewhere")
        expected = (
            f"https://grafana.example/d/gpu?var-node=gpu-node-02&var-uuid={failing}"
            "&r=nvidia.com%2Fgpu"
        )
        await expect(link).to_have_attribute("href", expected)

    seen = run_in_browser(
        database_url,
        session_factory,
        steps,
        settings_changes={"device_link_template": template},
    )
    assert seen.problems == []


def test_on_a_phone_devices_and_pods_are_cards_and_filters_fold_away(
    database_url: str, session_factory: sessionmaker[Session]
) -> None:
    async def steps(page: Page, base: str) -> None:
        for path, table in (("/devices", "#device-results"), ("/pods", "#pod-results")):
            await page.goto(base + path)
            await expect(page.locator("details.filters-fold")).not_to_have_attribute("open", "")
            await expect(page.locator("form.filters")).to_be_hidden()
            await expect(page.locator(f"{table} thead").first).to_be_hidden()
            width = await page.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, (path, width)
        # Every device card shows its health inside the screen.
        health = page.locator("#device-results td[data-label=Health]")
        await page.goto(base + "/devices")
        box = await health.first.bounding_box()
        assert box is not None and box["x"] + box["width"] <= 390
        await page.locator("summary", has_text="Filters").click()
        await expect(page.get_by_label("Health")).to_be_visible()

    seen = run_in_browser(database_url, session_factory, steps, viewport=(390, 844))
    assert seen.problems == []


def test_overview_resources_table_fits_at_1280_px(
    database_url: str, session_factory: sessionmaker[Session]
) -> None:
    async def steps(page: Page, base: str) -> None:
        await page.goto(base + "/")
        await page.wait_for_selector(".charts svg")
        sizes = await page.evaluate(
            "[...document.querySelectorAll('#overview-resources .table-wrap')]"
            ".map(e => [e.scrollWidth, e.clientWidth])"
        )
        assert sizes and all(scroll <= client for scroll, client in sizes), sizes
        assert await page.evaluate("document.documentElement.scrollWidth") <= 1280

    seen = run_in_browser(database_url, session_factory, steps, viewport=(1280, 900))
    assert seen.problems == []
