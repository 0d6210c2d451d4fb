"""The Jinja2 environment: autoescaping everywhere, and the small formatting helpers pages use.

Device IDs, pod names and labels come from outside, so every template escapes by default;
nothing here marks outside text safe.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from devicedeck.inventory.fields import UNHEALTHY, UNHEALTHY_OR_REMOVED
from devicedeck.inventory.write.derived_health import NOT_OFFERED_NO_STATUS
from devicedeck.resources import resource_dir

TEMPLATES = resource_dir("templates")
STATIC = resource_dir("static")

NOTHING = "\u2013"  # an en dash stands for "no value"
HEALTH_ICONS = {"Healthy": "✓", "Unhealthy": "✕", "Unknown": "?"}
UNSURE_LABEL = "Unhealthy or removed"

EVENT_LABELS = {
    "node_added": "Node added",
    "node_seen": "Node reporting again",
    "node_stale": "Node stale",
    "device_added": "Device added",
    "device_removed": "Device removed",
    "device_reappeared": "Device back",
    "health_changed": "Health changed",
    "topology_changed": "Topology changed",
    "allocated": "Allocated",
    "released": "Released",
    "claim_allocated": "Claim allocated",
    "claim_released": "Claim released",
    "dra_health_changed": "DRA health changed",
    "plugin_registered": "Plugin registered",
    "plugin_changed": "Plugin changed",
    "admin_action": "Admin action",
    "devices_counted": "Devices counted",
}
# How an event kind reads at a glance: good news, bad news, or neither.
EVENT_TONES = {
    "node_stale": "bad",
    "device_removed": "bad",
    "node_seen": "good",
    "device_reappeared": "good",
    "device_added": "good",
    "plugin_registered": "good",
    "allocated": "info",
    "claim_allocated": "info",
}


NAV_ITEMS = (
    ("overview", "Overview", "/"),
    ("nodes", "Nodes", "/nodes"),
    ("devices", "Devices", "/devices"),
    ("pods", "Pods", "/pods"),
    ("reliability", "Reliability", "/reliability"),
    ("events", "Events", "/events"),
    ("watchlist", "Watch list", "/watchlist"),
)
# htmx settings: no injected <style> (the CSP forbids inline styles), no eval, no history
# snapshots (back and forward ask the server for the full page, so data is fresh and filter
# inputs match the URL), and 422 answers (a filter that breaks a rule) are swapped in.
HTMX_CONFIG = json.dumps(
    {
        "includeIndicatorStyles": False,
        "allowEval": False,
        "allowScriptTags": False,
        "historyCacheSize": 0,
        "selfRequestsOnly": True,
        "defaultSwapStyle": "outerHTML",
        "responseHandling": [
            {"code": "204", "swap": False},
            {"code": "[23]..", "swap": True},
            {"code": "422", "swap": True, "error": False},
            {"code": "[45]..", "swap": False, "error": True},
        ],
    },
    separators=(",", ":"),
)


def health_class(health: Any) -> str:
    return str(health).lower() if health in HEALTH_ICONS else "unknown"


def health_icon(health: Any) -> str:
    return HEALTH_ICONS.get(str(health), "?")


def health_label(device: Any) -> str:
    """The word a device's health badge shows: a derived Unhealthy that the Node's status
    cannot confirm, or cannot tell from a device that went, is not called plainly Unhealthy."""
    if device.get("health_detail") == NOT_OFFERED_NO_STATUS:
        return UNSURE_LABEL
    if device.get("presence") == UNHEALTHY_OR_REMOVED and device.get("health") == UNHEALTHY:
        return UNSURE_LABEL
    return str(device.get("health"))


def numa_label(numa_nodes: list[int]) -> str:
    """A group of a node's devices named by the NUMA nodes its devices sit on."""
    if not numa_nodes:
        return "No NUMA affinity"
    return "NUMA " + " + ".join(str(n) for n in numa_nodes)


def number(value: Any) -> str:
    if value is None:
        return NOTHING
    return f"{int(value):,}"


def percent(part: Any, whole: Any) -> str:
    if not whole:
        return NOTHING
    return f"{100 * int(part) / int(whole):.0f}%"


def share(part: Any, whole: Any) -> float:
    """part/whole in percent for SVG widths; 0 for an empty whole."""
    if not whole:
        return 0.0
    return round(100 * int(part) / int(whole), 3)


def event_tone(event: dict[str, Any]) -> str:
    kind = event["kind"]
    if kind == "health_changed":
        return "good" if (event.get("after") or {}).get("health") == "Healthy" else "bad"
    return EVENT_TONES.get(kind, "neutral")


def event_label(kind: str) -> str:
    return EVENT_LABELS.get(kind, kind.replace("_", " ").capitalize())


def iso_utc(value: str | None) -> str:
    """A readable UTC time for the text of a <time> element; the script localises it."""
    if not value:
        return NOTHING
    moment = datetime.fromisoformat(value)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(start: str | None, end: str | None, now: datetime) -> str:
    if not start:
        return NOTHING
    begin = datetime.fromisoformat(start)
    finish = datetime.fromisoformat(end) if end else now
    return length((finish - begin).total_seconds())


def length(seconds: float | None) -> str:
    """A span of time in words: seconds, minutes, hours and minutes, or days and hours."""
    if seconds is None:
        return NOTHING
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} d {hours % 24} h"


def pathseg(value: Any) -> str:
    """One URL path segment: every reserved character escaped, '/' included."""
    return quote(str(value), safe="")


def query_url(path: str, params: dict[str, Any], **changes: Any) -> str:
    """path?query from params with changes applied; empty values are left out."""
    merged = {**params, **changes}
    pairs = [(k, str(v)) for k, v in merged.items() if v not in (None, "", False)]
    return f"{path}?{urlencode(pairs)}" if pairs else path


@lru_cache(maxsize=64)
def _fingerprint(path: Path, mtime_ns: int) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:10]


def static_url(name: str) -> str:
    """/static/NAME?v=HASH so browsers can keep assets until they change."""
    path = STATIC / name
    try:
        version = _fingerprint(path, path.stat().st_mtime_ns)
    except OSError:
        version = "missing"
    return f"/static/{name}?v={version}"


def build_environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        health_class=health_class,
        health_icon=health_icon,
        health_label=health_label,
        number=number,
        numa_label=numa_label,
        event_label=event_label,
        event_tone=event_tone,
        iso_utc=iso_utc,
        pathseg=pathseg,
    )
    env.globals.update(
        static=static_url,
        percent=percent,
        share=share,
        query_url=query_url,
        duration=duration,
        length=length,
        htmx_config=HTMX_CONFIG,
        nav_items=NAV_ITEMS,
    )
    return env
