"""A DRA device's DeviceTaintRule in a real Chromium: its Copy button puts the whole
here-document on the clipboard, every line of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.ui.actions import taint_rule_manifest

from .test_dashboard import CHROMIUM
from .test_dra import DRIVER, seed_dra
from .test_workflows import run_in_browser

pytest.importorskip("playwright")
from playwright.async_api import Page, expect

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]


def test_operator_copies_the_taint_rule_of_a_dra_device(
    database_url: str, session_factory: sessionmaker[Session]
) -> None:
    seed_dra(session_factory)
    expected = (
        "kubectl apply -f - <<'EOF'\n" + taint_rule_manifest(DRIVER, "dra-node", "gpu-0") + "\nEOF"
    )

    async def steps(page: Page, base: str) -> None:
        await page.goto(base + f"/dra/devices/{DRIVER}/dra-node/gpu-0")
        act = page.locator(".commands")
        await expect(act).to_contain_text("kind: DeviceTaintRule")
        await expect(act).to_contain_text("kubectl cordon dra-node")
        await act.get_by_role("button", name=re.compile(r"^Copy: kubectl apply -f -")).click()
        await expect(act.locator(".copy-status")).not_to_be_empty()
        copied = await page.evaluate("navigator.clipboard.readText()")
        assert copied == expected

    seen = run_in_browser(database_url, session_factory, steps)
    assert seen.problems == []
