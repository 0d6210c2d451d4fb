"""Screenshots of the dashboard for the README, from the seeded demo cluster.

.venv/bin/python -m tests.ui.browser.screenshots docs/screenshots
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from playwright.async_api import async_playwright

from devicedeck.clock import utcnow
from devicedeck.config import AuthMode, Settings
from devicedeck.db import create_db_engine, make_session_factory
from devicedeck.migrate import upgrade_to_head

from ..seed import seed_cluster
from ..servers import threaded_server
from .test_dashboard import CHROMIUM, CHROMIUM_ARGS

SHOTS = {
    "overview.png": ("/", "light"),
    "overview-dark.png": ("/", "dark"),
    "node.png": ("/nodes/gpu-node-02", "light"),
    "devices.png": ("/devices?resource=nvidia.com/gpu", "light"),
    "pod.png": ("/pods/ml-training/trainer-2-22-3", "light"),
    "events.png": ("/events?since=6h", "light"),
}


async def take(base: str, target: Path) -> None:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            for name, (path, scheme) in SHOTS.items():
                context = await browser.new_context(
                    viewport={"width": 1440, "height": 1000}, color_scheme=scheme
                )
                page = await context.new_page()
                await page.goto(base + path)
                await page.wait_for_selector("#live-status[data-state=open]")
                if path == "/":
                    await page.wait_for_selector(".charts svg")
                await page.screenshot(path=str(target / name))
                await context.close()
                print(f"wrote {target / name}")
        finally:
            await browser.close()


def main() -> None:
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshots")
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dd-shots") as tmp:
        url = f"sqlite:///{Path(tmp) / 'shots.db'}"
        upgrade_to_head(url)
        engine = create_db_engine(url)
        seed_cluster(make_session_factory(engine), utcnow(), nodes=6)
        engine.dispose()
        settings = Settings(database_url=url, auth=AuthMode.OFF, stale_after=300)
        with threaded_server(settings) as (base, _app):
            asyncio.run(take(base, target))


if __name__ == "__main__":
    main()
