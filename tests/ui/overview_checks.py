"""Reading the overview as a person reads it, and checking that its parts tell one story: the
totals, the resources table, "Needs attention", the DRA card and the charts' "now"."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .dom import Element

COLUMNS = ("nodes", "devices", "healthy", "unhealthy", "unknown", "allocated", "free")
PLUGIN_UNHEALTHY = re.compile(r"(\d+) unhealthy (\S+)$")
UNKNOWN = re.compile(r"(\d+) unknown (\S+) (node not reporting|health not reported)$")
DRA_UNHEALTHY = re.compile(r"(\d+) unhealthy (\S+) DRA pool (\S+)$")
CHART_NOW = re.compile(r"now (\d+) allocated · (\d+) healthy of (\d+)")
ICON = re.compile(r"^\W+")  # a health badge's icon before its words
STALE = re.compile(r"(\d+) stale")
SAMPLE = re.compile(r": (\d+) allocated, (\d+) healthy of (\d+) devices$")


def number(text: str) -> int:
    return int(text.replace(",", ""))


@dataclass
class Overview:
    kpis: dict[str, tuple[int, str]]
    table: dict[str, dict[str, int]]
    stale_nodes: list[str] = field(default_factory=list)
    plugin_unhealthy: dict[tuple[str, str], int] = field(default_factory=dict)
    unknown: dict[tuple[str, str], int] = field(default_factory=dict)
    dra_unhealthy: dict[tuple[str, str, str], int] = field(default_factory=dict)
    all_clear: bool = False
    # resource -> (allocated, healthy, devices): the caption's "now" and the last sample
    chart_now: dict[str, tuple[int, ...]] = field(default_factory=dict)
    chart_last: dict[str, tuple[int, ...]] = field(default_factory=dict)


def read_overview(page: Element) -> Overview:
    kpis = {
        kpi.one("span", class_="kpi-label").clean_text: (
            number(kpi.one("span", class_="kpi-value").clean_text),
            kpi.one("span", class_="kpi-note").clean_text,
        )
        for kpi in page.find_all("a", predicate=lambda e: e.has_class("kpi"))
    }
    table: dict[str, dict[str, int]] = {}
    for row in page.by_id("overview-resources").find_all("tr"):
        header = row.find("th", scope="row")
        if header is not None:
            cells = [number(td.clean_text) for td in row.find_all("td")[: len(COLUMNS)]]
            table[header.clean_text] = dict(zip(COLUMNS, cells, strict=True))
    seen = Overview(kpis=kpis, table=table)
    problems = page.by_id("overview-problems")
    seen.all_clear = "All clear" in problems.clean_text
    for item in problems.find_all("li", predicate=lambda e: e.has_class("attention-item")):
        place = item.one(predicate=lambda e: e.has_class("attention-node")).clean_text.split()[0]
        for reason in item.one("ul").find_all("li"):
            text = ICON.sub("", reason.clean_text)
            if text.startswith("Stale"):
                seen.stale_nodes.append(place)
            elif found := DRA_UNHEALTHY.match(text):
                key = (place, found[2], found[3])
                seen.dra_unhealthy[key] = int(found[1])
            elif found := PLUGIN_UNHEALTHY.match(text):
                seen.plugin_unhealthy[(place, found[2])] = int(found[1])
            elif found := UNKNOWN.match(text):
                seen.unknown[(place, found[2])] = int(found[1])
    for figure in page.find_all("figure"):
        resource = figure.one("span", class_="mono").clean_text
        caption = CHART_NOW.search(figure.one("figcaption").clean_text)
        assert caption is not None
        seen.chart_now[resource] = tuple(int(n) for n in caption.groups())
        last = SAMPLE.search(figure.find_all("title")[-1].clean_text)
        assert last is not None
        seen.chart_last[resource] = tuple(int(n) for n in last.groups())
    return seen


def dra_card(seen: Overview) -> dict[str, int]:
    """The DRA card's numbers: devices, and allocated, free, unhealthy from its note."""
    value, note = seen.kpis["DRA devices"]
    counts = {"devices": value, "allocated": 0, "free": 0, "unhealthy": 0}
    for amount, what in re.findall(r"(\d+) (allocated|free|unhealthy)", note):
        counts[what] = int(amount)
    return counts


def check_one_picture(seen: Overview, *, charts: bool) -> None:
    """Every part of the page agrees with every other."""
    totals = {c: sum(row[c] for row in seen.table.values()) for c in COLUMNS}
    assert seen.kpis["Devices"][0] == totals["devices"]
    assert seen.kpis["Healthy"][0] == totals["healthy"]
    assert seen.kpis["Unhealthy"][0] == totals["unhealthy"] == sum(seen.plugin_unhealthy.values())
    assert seen.kpis["Unknown"][0] == totals["unknown"] == sum(seen.unknown.values())
    assert seen.kpis["Allocated"][0] == totals["allocated"]
    for resource, row in seen.table.items():
        listed = sum(n for (_, r), n in seen.plugin_unhealthy.items() if r == resource)
        assert listed == row["unhealthy"], resource
    found = STALE.search(seen.kpis["Nodes"][1])
    stale = int(found[1]) if found else 0
    assert stale == len(seen.stale_nodes)
    dra = dra_card(seen) if "DRA devices" in seen.kpis else {"unhealthy": 0}
    assert dra["unhealthy"] == sum(seen.dra_unhealthy.values())
    if "DRA devices" in seen.kpis:
        assert "DRA counted apart" in seen.kpis["Unhealthy"][1]
    anything = totals["unhealthy"] + totals["unknown"] + dra["unhealthy"] + stale
    if anything:
        assert not seen.all_clear
    if charts:
        assert set(seen.table) <= set(seen.chart_now)
        for resource, now in seen.chart_now.items():
            row = seen.table.get(resource, dict.fromkeys(COLUMNS, 0))
            expected = (row["allocated"], row["healthy"], row["devices"])
            assert now == expected, resource
            assert seen.chart_last[resource] == expected, resource
