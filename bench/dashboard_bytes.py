"""Bytes an open dashboard tab downloads per minute (a benchmark, not a test).

    .venv/bin/devicedeck demo --port 8765 --data-dir /tmp/demo &     # or any running service
    .venv/bin/python -m bench.dashboard_bytes --url http://127.0.0.1:8765 --seconds 60

Opens each page in headless Chromium, lets it load, then counts for SECONDS every byte the tab
receives over the network (headers and bodies as sent, compressed or not; the event stream
included) and the requests the live refresher makes. Prints one line per page.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from playwright.async_api import async_playwright

from tests.ui.browser.test_dashboard import CHROMIUM, CHROMIUM_ARGS

PAGES = ("/", "/events", "/devices", "/pods", "/nodes")


async def measure(url: str, path: str, seconds: float) -> dict[str, Any]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            cdp = await page.context.new_cdp_session(page)
            await cdp.send("Network.enable")
            counted = {"bytes": 0, "requests": 0, "counting": False}

            def received(params: dict[str, Any]) -> None:
                if counted["counting"]:
                    counted["bytes"] += params.get("encodedDataLength", 0)

            def response(params: dict[str, Any]) -> None:
                # Header bytes of each response; bodies arrive through dataReceived.
                if counted["counting"]:
                    counted["requests"] += 1
                    counted["bytes"] += params["response"].get("encodedDataLength", 0) or 0

            cdp.on("Network.dataReceived", received)
            cdp.on("Network.responseReceived", response)
            await page.goto(url + path)
            await page.wait_for_load_state("networkidle")
            first = await page.evaluate(
                "performance.getEntriesByType('navigation')[0].encodedBodySize"
            )
            counted["counting"] = True
            await asyncio.sleep(seconds)
            counted["counting"] = False
            return {"path": path, "first_load_body": first, **counted}
        finally:
            await browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="base URL of a running dashboard")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--page", action="append", help="pages to open (default: all five)")
    args = parser.parse_args()
    for path in args.page or PAGES:
        result = asyncio.run(measure(args.url.rstrip("/"), path, args.seconds))
        per_minute = result["bytes"] * 60 / args.seconds
        print(
            f"{path:10} first load body {result['first_load_body']:>7,} B  "
            f"then {result['bytes']:>9,} B in {args.seconds:.0f} s "
            f"({per_minute / 1000:,.1f} kB/min), {result['requests']} responses"
        )


if __name__ == "__main__":
    main()
