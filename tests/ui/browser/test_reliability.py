"""The reliability ranking in a real Chromium: "which GPUs should I drain and send back, and how
many jobs did each cost us?", on the seeded demo cluster with one GPU flapping."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow

from ..seed import GPU, Cluster, device, gpu_id
from .test_dashboard import CHROMIUM
from .test_workflows import run_in_browser

pytest.importorskip("playwright")
from playwright.async_api import Page, expect

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]


def flap(factory: sessionmaker[Session], node: int, index: int, times: int) -> None:
    """GPU `index` of gpu-node-0N turns Unhealthy and back `times` times, a minute apart,
    after everything the seed wrote (its sequence numbers continue past the seed's)."""
    cluster = Cluster(factory, seqs={f"gpu-node-{node:02d}/{GPU}": 1000})
    start = utcnow() - timedelta(minutes=2 * times + 1)
    for step in range(2 * times):
        gpus = [device(gpu_id(node, i), 0 if i < 4 else 1) for i in range(8)]
        if step % 2 == 0:
            gpus[index] = device(gpu_id(node, index), 0, "Unhealthy")
        cluster.devices(f"gpu-node-{node:02d}", GPU, gpus, start + timedelta(minutes=step))


def test_operator_finds_the_flapping_gpu_and_the_jobs_it_cost(
    database_url: str, session_factory: sessionmaker[Session]
) -> None:
    flapping = gpu_id(1, 5)
    failing = gpu_id(2, 3)

    async def steps(page: Page, base: str) -> None:
        flap(session_factory, 1, 5, 3)
        await page.goto(base + "/")
        await (
            page.get_by_role("navigation", name="Main")
            .get_by_role("link", name="Reliability")
            .click()
        )
        await expect(page).to_have_url(base + "/reliability")
        rows = page.locator(".reliability-table tbody tr")
        # Three failures lead; the GPU that failed once, then the removed one, follow.
        await expect(rows.nth(0).locator("th")).to_have_text(flapping)
        await expect(rows.nth(1).locator("th")).to_have_text(failing)
        await expect(rows).to_have_count(3)
        await expect(rows.nth(0).locator("td[data-label='Failures']")).to_have_text("3")

        # Sorting by pods hit, largest first: the failing GPU's trainer was hit for hours.
        pods_hit = page.locator(".reliability-table thead th", has_text="Pods hit")
        await pods_hit.get_by_role("link").click()
        await expect(pods_hit).to_have_attribute("aria-sort", "ascending")
        await pods_hit.get_by_role("link").click()
        await expect(pods_hit).to_have_attribute("aria-sort", "descending")
        await expect(rows.nth(0).locator("th")).to_have_text(failing)
        await expect(rows.nth(0).locator("td[data-label='Pods hit']")).to_contain_text(
            "ml-training/trainer-2-22-3"
        )

        # The same ranking as CSV.
        export = await page.locator("#reliability-results a.export").get_attribute("href")
        assert export is not None
        answer = await page.request.get(base + export)
        table = list(csv.DictReader(io.StringIO(await answer.text())))
        assert [r["device_id"] for r in table][:1] == [failing]
        assert len(table) == 3

        # The last half hour: the flapping GPU's failures; the failing one was Unhealthy throughout.
        await page.get_by_label("Window").select_option("custom")
        await page.get_by_label("Since").fill("30m")
        await expect(page).to_have_url(re.compile(r"since=30m"))
        await expect(page.locator(".filter-note")).to_contain_text("(30 min)")
        flapper = rows.filter(has_text=flapping)
        await expect(flapper.locator("td[data-label='Failures']")).to_have_text("3")
        sick = rows.filter(has_text=failing)
        await expect(sick.locator("td[data-label='Failures']")).to_have_text("0")
        await expect(sick.locator("td[data-label='Time unhealthy']")).to_have_text("30 min")

        # Its node page marks its tile; its page counts the failures beside Health since.
        await flapper.get_by_role("link", name="gpu-node-01").click()
        await expect(page).to_have_url(base + "/nodes/gpu-node-01")
        tile = page.locator("#node-devices li.tile", has=page.locator(".flap"))
        await expect(tile).to_have_count(1)
        await expect(tile).to_contain_text(flapping)
        await expect(tile.locator(".flap")).to_contain_text("flapping: 3 in 24 h")
        await tile.get_by_role("link").click()
        await expect(page.locator(".recent-failures")).to_have_text("unhealthy 3 times in 24 h")
        await expect(page.locator("#device-reliability")).to_contain_text(
            re.compile(r"Failures\s*3 ")
        )

    seen = run_in_browser(database_url, session_factory, steps)
    assert seen.problems == []
