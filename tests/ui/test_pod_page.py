"""The pod page, /pods/NS/NAME: what a pod held, and whether a device was unhealthy meanwhile;
and the HTML 404 page for every path nothing answers."""

from __future__ import annotations

from .conftest import GPU, Ingest, Pages, dev, held


def finished_job_on_a_failing_gpu(ingest: Ingest) -> None:
    ingest.devices("node-a", [dev("gpu-0"), dev("gpu-1")])
    ingest.pods("node-a", [held("ml", "trainer-0", "main", GPU, "gpu-0", "gpu-1")])
    ingest.devices("node-a", [dev("gpu-0", "Unhealthy"), dev("gpu-1")])
    ingest.devices("node-a", [dev("gpu-0"), dev("gpu-1")])
    ingest.pods("node-a", [])


def test_finished_pod_page_marks_the_device_that_was_unhealthy_while_held(
    pages: Pages, ingest: Ingest
) -> None:
    finished_job_on_a_failing_gpu(ingest)
    page = pages.dom("/pods/ml/trainer-0")
    summary = page.by_id("pod-summary")
    assert "ml/trainer-0" in summary.one("h1").clean_text
    assert "Finished" in summary.one("h1").clean_text
    verdict = summary.one("div", class_="notice notice-error verdict")
    assert "unhealthy while this pod held it" in verdict.clean_text
    assert "gpu-0" in verdict.clean_text and "gpu-1" not in verdict.clean_text
    holds = page.by_id("pod-holds")
    lanes = holds.find_all("svg", class_="tl-lane")
    assert len(lanes) == 2
    colours = [
        [r.attrs["class"] for r in lane.find_all("rect") if r.attrs["class"].startswith("st-")]
        for lane in lanes
    ]
    assert sorted(colours) == [["st-healthy"], ["st-healthy", "st-unhealthy", "st-healthy"]]
    table = holds.one("table", class_="table table-compact holds-table table-cards")
    rows = {row.one("th").clean_text: row.clean_text for row in table.find_all("tr")[1:]}
    assert "Unhealthy while held" in rows["gpu-0"] and "Healthy throughout" in rows["gpu-1"]
    assert holds.find("a", href="/nodes/node-a") is not None


def test_pod_page_is_linked_from_pods_events_devices_and_node(pages: Pages, ingest: Ingest) -> None:
    ingest.devices("node-a", [dev("gpu-0"), dev("gpu-1")])
    ingest.pods("node-a", [held("ml", "job-1.a", "main", GPU, "gpu-0")])
    href = "/pods/ml/job-1.a"
    for path in ("/pods", "/events", "/devices", "/nodes/node-a"):
        assert pages.dom(path).find("a", href=href) is not None, path
    [device] = [a for a in pages.dom("/devices").find_all("a") if a.text == "gpu-0"]
    assert pages.dom(device.attrs["href"]).find("a", href=href) is not None
    page = pages.dom(href)
    assert "ml/job-1.a" in page.one("h1").clean_text and "Running" in page.one("h1").clean_text
    assert "No device was unhealthy" in page.by_id("pod-summary").clean_text


def test_unknown_pod_and_unknown_paths_get_the_html_404_page(pages: Pages) -> None:
    page = pages.dom("/pods/ml/nobody", expect=404)
    assert page.one("h1").text == "No such pod"
    for path in ("/nope", "/pods/a/b/c", "/devices/1/more", "/nodes/"):
        response = pages.get(path, expect=404)
        assert response.headers["content-type"].startswith("text/html"), path
    api = pages.get("/api/v1/nope", expect=404)
    assert api.json()["error"]["code"] == "not_found"
    assert pages.client.post("/nope", headers=pages.headers).status_code == 404
    assert pages.client.delete("/devices", headers=pages.headers).status_code == 405
    icon = pages.get("/favicon.ico")
    assert icon.headers["content-type"].startswith("image/svg+xml")
