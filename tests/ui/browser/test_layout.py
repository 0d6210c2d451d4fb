"""Nothing is cut short and nothing leaves its card, on a phone (390 px wide), a laptop (1280)
and a wide screen (1920), with names as long as Kubernetes allows them to be: the node page
(kubectl commands, device tiles, resources advertised by hand and their actions), the pod page
(health lanes, devices held), the DRA tab and a node's DRA pool. Copy copies over plain HTTP
too, where browsers offer no Clipboard API, and says what it did."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.clock import utcnow
from devicedeck.config import AuthMode, KubeMode, Settings
from devicedeck.db import write_session
from devicedeck.kube import dra_sync, node_sync
from devicedeck.sim.apiserver import SimApiServer

from ..conftest import MakeToken
from ..seed import GPU, gpu_id, pod, seed_cluster
from ..servers import threaded_server, wait_until
from .test_dashboard import CHROMIUM, CHROMIUM_ARGS, Browser

pytest.importorskip("playwright")
from playwright.async_api import Page, async_playwright, expect

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]

WIDTHS = (390, 1280, 1920)
LONG_NAMESPACE = "computer-vision-research-team"
LONG_POD = "inference-server-with-a-long-deployment-name-7f9c8d6b5-x2k4q"
LONG_CONTAINER = "model-server-container"
# An extended resource's name part may be 63 characters long.
LONG_RESOURCE = "accelerators.example.com/fpga-card-with-a-resource-name-this-long"
DRIVER = "gpu.accelerators.example.com"
DRA_NODE = "dra-node-in-rack-17"
HELD_POD_PAGE = f"/pods/{LONG_NAMESPACE}/{LONG_POD}"
TOKEN = "layout-test-api-server-token"

# What a reader would call cut or spilled, found in the page as laid out (layout_problems.js):
# - the page wider than the window (the whole page scrolls sideways);
# - an element with text whose overflow is hidden and whose text is wider than its box
#   (unless it is there for screen readers only, or its title holds the whole text);
# - an element that sticks out of its card or tile, with nothing between them that scrolls;
# - a box that scrolls sideways other than a table's wrapper (a table may scroll: its
#   columns stay reachable).
FIND_PROBLEMS = (Path(__file__).parent / "layout_problems.js").read_text()


def seed(factory: sessionmaker[Session]) -> None:
    """The seeded cluster, plus the longest names: a pod holding a GPU of gpu-node-03, a DRA
    pool whose devices are held and watched by pods with long names, and an extended resource
    advertised by hand on gpu-node-01."""
    now = utcnow()
    cluster = seed_cluster(factory, now, nodes=3)
    held = pod(LONG_NAMESPACE, LONG_POD, LONG_CONTAINER, GPU, gpu_id(3, 1), gpu_id(3, 2))
    cluster.pods("gpu-node-03", [held], now - timedelta(minutes=30))
    slice_ = {
        "metadata": {"name": f"{DRA_NODE}-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": DRA_NODE,
            "pool": {"name": DRA_NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}-partition-{i}"} for i in range(4)],
        },
    }
    result = {"request": "gpu", "driver": DRIVER, "pool": DRA_NODE}
    claim = {
        "metadata": {"namespace": LONG_NAMESPACE, "name": f"{LONG_POD}-gpu", "uid": "c1"},
        "status": {
            "allocation": {"devices": {"results": [{**result, "device": "gpu-0-partition-0"}]}},
            "reservedFor": [{"resource": "pods", "name": LONG_POD, "uid": "p1"}],
        },
    }
    monitor = {
        "metadata": {"namespace": LONG_NAMESPACE, "name": "gpu-health-monitor-daemon", "uid": "m"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {**result, "device": f"gpu-{i}-partition-{i}", "adminAccess": True}
                        for i in range(4)
                    ]
                }
            }
        },
    }
    nodes = [
        cluster_node(DRA_NODE, {}),
        cluster_node("gpu-node-01", {GPU: "8", LONG_RESOURCE: "4", "example.com/dongle": "2"}),
    ]
    with write_session(factory) as session:
        node_sync.apply_node_list(session, nodes, now)
        dra_sync.apply_slice_list(session, [slice_], now)
        dra_sync.apply_claim_list(session, [claim, monitor], now)


def cluster_node(name: str, capacity: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": dict(capacity), "allocatable": dict(capacity)},
    }


def report(found: dict[str, list[str]]) -> str:
    return "\n".join(
        f"{page}: {problem}" for page, problems in found.items() for problem in problems
    )


async def sign_in(page: Page, base: str, token: str) -> None:
    await page.goto(base + "/login")
    await page.get_by_label("API token").fill(token)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page).to_have_url(base + "/")


Look = Callable[[Page], Awaitable[dict[str, list[str]]]]


async def at_each_width(
    base: str, token: str, look: Look
) -> tuple[dict[str, list[str]], list[str]]:
    """`look` (path -> what is wrong there) run signed in, in a fresh page at each width; what
    it found by width and path, and the console's errors and warnings."""
    found: dict[str, list[str]] = {}
    console: list[str] = []
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            for width in WIDTHS:
                context = await chromium.new_context(viewport={"width": width, "height": 900})
                page = await context.new_page()
                seen = Browser(page)
                await sign_in(page, base, token)
                for path, problems in (await look(page)).items():
                    found[f"{width} {path}"] = problems
                console += seen.problems
                await context.close()
        finally:
            await chromium.close()
    return found, console


def pages(base: str, paths: list[str]) -> Look:
    """Each path: what FIND_PROBLEMS finds, and the checks of what it holds."""

    async def look(page: Page) -> dict[str, list[str]]:
        found = {}
        for path in paths:
            await page.goto(base + path)
            await expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
            found[path] = await page.evaluate(FIND_PROBLEMS) + await what_it_holds(page, path)
        return found

    return look


async def what_it_holds(page: Page, path: str) -> list[str]:
    """What each page must show whole, beyond not being cut: every kubectl command on one
    screen, and each pod's health lanes wide enough to read."""
    problems = []
    for command in await page.locator("code.cmd").all():
        box = await command.bounding_box()
        if box is None or box["width"] < 120:
            problems.append(f"a command box is {box and box['width']} px wide")
    lanes = await page.locator("svg.tl-lane").all()
    if path == HELD_POD_PAGE and not lanes:
        problems.append("no health lane on the pod page")
    for lane in lanes:
        box = await lane.bounding_box()
        card = await lane.locator("xpath=ancestor::section[1]").bounding_box()
        assert box is not None and card is not None
        if box["width"] < 0.4 * card["width"]:
            problems.append(f"a health lane is {box['width']:.0f} px of {card['width']:.0f}")
    return problems


def test_nothing_is_cut_or_spills_at_phone_laptop_and_wide_widths(
    database_url: str, session_factory: sessionmaker[Session], make_token: MakeToken
) -> None:
    seed(session_factory)
    token = make_token("read", name="reader")
    settings = Settings(database_url=database_url, auth=AuthMode.TOKEN, stale_after=3600)
    paths = ["/nodes/gpu-node-01", "/nodes/gpu-node-03", f"/nodes/{DRA_NODE}", HELD_POD_PAGE]
    with threaded_server(settings) as (base, _app):
        found, console = asyncio.run(at_each_width(base, token, pages(base, [*paths, "/dra"])))
    assert not any(found.values()), report(found)
    assert console == []


@contextmanager
def cluster_with_resources_advertised_by_hand() -> Iterator[SimApiServer]:
    with SimApiServer(None, admin_token=TOKEN) as server:
        capacity = {GPU: "8", LONG_RESOURCE: "4", "example.com/dongle": "2"}
        server.store.put("nodes", cluster_node("gpu-node-01", capacity))
        yield server


def test_an_admin_sees_the_advertised_resources_and_their_actions_whole(
    database_url: str,
    session_factory: sessionmaker[Session],
    make_token: MakeToken,
    tmp_path: Path,
) -> None:
    """With cluster access, an admin's table of resources advertised by hand has a Remove
    button per row, and the form to add one, in the side column."""
    seed_cluster(session_factory, utcnow(), nodes=1)
    token = make_token("admin", name="admin")
    with cluster_with_resources_advertised_by_hand() as cluster:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        settings = Settings(
            database_url=database_url,
            auth=AuthMode.TOKEN,
            stale_after=3600,
            kube=KubeMode.KUBECONFIG,
            kubeconfig=str(kubeconfig),
        )
        with threaded_server(settings) as (base, app):
            wait_until(lambda: app.state.kube_api is not None, what="cluster access")
            found, console = asyncio.run(at_each_width(base, token, manual_table(base)))
    assert not any(found.values()), report(found)
    assert console == []


def manual_table(base: str) -> Look:
    async def look(page: Page) -> dict[str, list[str]]:
        await page.goto(base + "/nodes/gpu-node-01")
        card = page.locator("section", has=page.locator("#manual-title"))
        remove = card.get_by_role("button", name=f"Remove {LONG_RESOURCE}")
        await expect(remove).to_be_visible()
        problems: list[str] = await page.evaluate(FIND_PROBLEMS)
        # The last column is inside the card, not past its edge.
        button, outer = await remove.bounding_box(), await card.bounding_box()
        assert button is not None and outer is not None
        if button["x"] + button["width"] > outer["x"] + outer["width"]:
            problems.append("the Remove button is past the card's edge")
        return {"/nodes/gpu-node-01": problems}

    return look


# Plain HTTP from a name other than localhost: not a secure context, so no Clipboard API.
PLAIN_HOST = "devicedeck.test"


async def copy_over_plain_http(port: int) -> tuple[dict[str, Any], Browser]:
    command = "kubectl cordon gpu-node-02"
    seen: dict[str, Any] = {}
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {PLAIN_HOST} 127.0.0.1"],
            headless=True,
        )
        try:
            context = await chromium.new_context(viewport={"width": 1280, "height": 900})
            # Only the secure origin may read the clipboard back, to see what was copied.
            await context.grant_permissions(
                ["clipboard-read", "clipboard-write"], origin=f"http://127.0.0.1:{port}"
            )
            page = await context.new_page()
            browser = Browser(page)
            await page.goto(f"http://{PLAIN_HOST}:{port}/nodes/gpu-node-02")
            seen["secure"] = await page.evaluate("window.isSecureContext")
            seen["api"] = await page.evaluate("typeof navigator.clipboard")
            status = page.locator(".commands .copy-status")
            await page.get_by_role("button", name=f"Copy: {command}").click()
            await expect(status).to_have_text(f"Copied: {command}")
            reader = await context.new_page()
            await reader.goto(f"http://127.0.0.1:{port}/livez")
            seen["clipboard"] = await reader.evaluate("navigator.clipboard.readText()")
            # A browser that refuses to copy the selection as well: the command is left
            # selected, and the card says to press Ctrl+C.
            await page.add_init_script("document.execCommand = () => false;")
            await page.reload()
            await page.get_by_role("button", name=f"Copy: {command}").click()
            await expect(status).to_contain_text("press Ctrl+C")
            seen["selected"] = await page.evaluate("window.getSelection().toString()")
            await context.close()
        finally:
            await chromium.close()
    return seen, browser


def test_copy_works_over_plain_http_and_says_what_it_did(
    database_url: str, session_factory: sessionmaker[Session]
) -> None:
    seed_cluster(session_factory, utcnow(), nodes=2)
    settings = Settings(database_url=database_url, auth=AuthMode.OFF, stale_after=3600)
    with threaded_server(settings) as (base, _app):
        port = int(base.rpartition(":")[2])
        seen, browser = asyncio.run(copy_over_plain_http(port))
    assert (seen["secure"], seen["api"]) == (False, "undefined")
    assert seen["clipboard"] == "kubectl cordon gpu-node-02"
    assert seen["selected"] == "kubectl cordon gpu-node-02"
    # Chromium says it ignores the Cross-Origin-Opener-Policy header on an origin that is not
    # secure, as the standard has it; any other message is a problem.
    ignored = "Cross-Origin-Opener-Policy header has been ignored"
    assert [p for p in browser.problems if ignored not in p] == []
