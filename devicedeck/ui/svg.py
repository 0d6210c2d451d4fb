"""Geometry for the server-drawn SVG charts: coordinates and labels, no markup.

Templates turn these numbers into <svg> elements, so outside text (pod names) still goes
through autoescaping.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from devicedeck.ui.templating import pathseg

WIDTH = 480
HEIGHT = 170
LEFT = 40
RIGHT = 12
TOP = 12
BOTTOM = 26


@dataclass(frozen=True)
class Frame:
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def plot_width(self) -> float:
        return self.width - LEFT - RIGHT

    @property
    def plot_height(self) -> float:
        return self.height - TOP - BOTTOM

    @property
    def bottom(self) -> float:
        return self.height - BOTTOM

    def x(self, fraction: float) -> float:
        return round(LEFT + fraction * self.plot_width, 2)

    def y(self, value: float, top: float) -> float:
        return round(self.bottom - (value / top) * self.plot_height, 2) if top else self.bottom


def _step_path(xs: list[float], ys: list[float]) -> str:
    """A line that holds each value until the next sample (the data are step functions)."""
    if not xs:
        return ""
    parts = [f"M{xs[0]} {ys[0]}"]
    for index in range(1, len(xs)):
        parts.append(f"H{xs[index]}")
        if ys[index] != ys[index - 1]:
            parts.append(f"V{ys[index]}")
    return " ".join(parts)


def _nice_top(value: int) -> int:
    if value <= 4:
        return max(value, 1)
    for step in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000):
        if value <= step * 4:
            return -(-value // step) * step
    return value


def _time_label(moment: datetime, span: timedelta) -> str:
    if span > timedelta(days=2):
        return moment.strftime("%a %d")
    return moment.strftime("%H:%M")


def resource_chart(
    times: list[str], series: dict[str, list[int]], frame: Frame | None = None
) -> dict[str, Any]:
    """Step lines for devices and healthy, a filled step area for allocated, and axes. The
    chart starts at the last sample before the resource had a device, not at the window's
    start: twenty minutes of data in a day's window would be a flat line and a spike."""
    frame = frame or Frame()
    with_devices = next((i for i, n in enumerate(series["devices"]) if n), 0)
    skip = min(max(with_devices - 1, 0), len(times) - 2) if len(times) > 2 else 0
    times = times[skip:]
    series = {name: values[skip:] for name, values in series.items()}
    moments = [datetime.fromisoformat(t) for t in times]
    span = moments[-1] - moments[0] if len(moments) > 1 else timedelta(0)
    count = max(len(moments) - 1, 1)
    xs = [frame.x(index / count) for index in range(len(moments))]
    top = _nice_top(max(series["devices"] + series["healthy"] + series["allocated"] + [0]))

    def ys(name: str) -> list[float]:
        return [frame.y(v, top) for v in series[name]]

    allocated_line = _step_path(xs, ys("allocated"))
    area = f"{allocated_line} V{frame.bottom} H{xs[0]} Z" if allocated_line else ""
    y_ticks = [
        {"y": frame.y(v, top), "label": f"{v:,}"}
        for v in sorted({0, top // 2 if top >= 2 else top, top})
    ]
    x_ticks = []
    for fraction in (0, 0.25, 0.5, 0.75, 1):
        index = round(fraction * count)
        now = fraction == 1
        x_ticks.append(
            {
                "x": frame.x(fraction),
                "label": "now" if now else _time_label(moments[index], span),
                # The script writes the label again in the zone the reader chose.
                "time": None if now else moments[index].isoformat(),
                "anchor": _anchor(fraction),
            }
        )
    # One hover column per sample, each with the values at that time as its tooltip.
    step = frame.plot_width / count
    samples = [
        {
            "x": round(max(LEFT, x - step / 2), 2),
            "width": round(step, 2),
            "time": moments[index].isoformat(),
            "values": {name: values[index] for name, values in series.items()},
        }
        for index, x in enumerate(xs)
    ]
    last = {name: values[-1] for name, values in series.items()}
    first = {name: values[0] for name, values in series.items()}
    return {
        "width": frame.width,
        "height": frame.height,
        "left": LEFT,
        "right": frame.width - RIGHT,
        "top": TOP,
        "bottom": frame.bottom,
        "devices": _step_path(xs, ys("devices")),
        "healthy": _step_path(xs, ys("healthy")),
        "allocated": allocated_line,
        "allocated_area": area,
        "y_ticks": y_ticks,
        "x_ticks": x_ticks,
        "tick_style": "day" if span > timedelta(days=2) else "clock",
        "samples": samples,
        "plot_top": TOP,
        "plot_height": frame.plot_height,
        "first": first,
        "last": last,
        "peak_allocated": max(series["allocated"] or [0]),
        "low_healthy": min(series["healthy"] or [0]),
    }


def _anchor(fraction: float) -> str:
    if fraction == 0:
        return "start"
    if fraction == 1:
        return "end"
    return "middle"


@dataclass(frozen=True)
class Span:
    start: datetime
    end: datetime


def timeline(
    first_seen: str | None,
    now: datetime,
    health_history: list[dict[str, Any]],
    allocation_history: list[dict[str, Any]],
    width: int = 1000,
) -> dict[str, Any]:
    """Two lanes over the device's life: its health, and which pod held it. x runs from 0 to
    `width`; the lanes stretch to the page width, the labels are HTML."""
    times = [datetime.fromisoformat(e["at"]) for e in health_history if e.get("at")]
    times += [datetime.fromisoformat(a["started"]) for a in allocation_history]
    if first_seen:
        times.append(datetime.fromisoformat(first_seen))
    start = min(times) if times else now
    end = now
    total = max((end - start).total_seconds(), 1.0)
    left, right = 0, width

    def x(moment: datetime) -> float:
        fraction = min(max((moment - start).total_seconds() / total, 0.0), 1.0)
        return round(left + fraction * (right - left), 2)

    health = []
    current: str | None = None
    reported = "Unknown"
    since = start
    for event in sorted(health_history, key=lambda e: e["at"]):
        moment = datetime.fromisoformat(event["at"])
        state = _health_state(event, reported)
        if state != "Removed":
            reported = state
        if state == current:
            continue
        if current is not None:
            health.append(_segment(x(since), x(moment), current, since, moment))
        current, since = state, moment
    if current is not None:
        health.append(_segment(x(since), x(end), current, since, None))
    holders = []
    for allocation in sorted(allocation_history, key=lambda a: a["started"]):
        begin = datetime.fromisoformat(allocation["started"])
        finish = datetime.fromisoformat(allocation["ended"]) if allocation["ended"] else None
        segment = _segment(x(begin), x(finish or end), "held", begin, finish)
        segment["who"] = f"{allocation['namespace']}/{allocation['pod']}"
        segment["container"] = allocation["container"]
        holders.append(segment)
    return {
        "width": width,
        "left": left,
        "right": right,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "health": health,
        "holders": holders,
        "middle": (start + (end - start) / 2).isoformat(),
    }


def _health_state(event: dict[str, Any], reported: str) -> str:
    """Removed, or the health reported last (a device that comes back keeps its old health
    until the plugin says otherwise)."""
    if event.get("kind") == "device_removed" or event.get("state") == "removed":
        return "Removed"
    return str(event.get("health") or reported)


def _segment(
    x1: float, x2: float, state: str, begin: datetime, finish: datetime | None
) -> dict[str, Any]:
    return {
        "x": x1,
        "width": round(max(x2 - x1, 1.5), 2),
        "state": state,
        "begin": begin.isoformat(),
        "end": finish.isoformat() if finish else None,
    }


def pod_timeline(pod: dict[str, Any], now: datetime, width: int = 1000) -> dict[str, Any]:
    """One lane per device hold, on an axis from the pod's first hold to its last release (or
    now): the device's health while the pod held it, blank outside the hold."""
    start = datetime.fromisoformat(pod["started"])
    end = datetime.fromisoformat(pod["ended"]) if pod["ended"] else now
    total = max((end - start).total_seconds(), 1.0)

    def x(moment: str) -> float:
        seconds = (datetime.fromisoformat(moment) - start).total_seconds()
        return round(min(max(seconds / total, 0.0), 1.0) * width, 2)

    def segments_of(hold: dict[str, Any]) -> list[dict[str, Any]]:
        segments = []
        for span in hold["health_during"]:
            segment = _segment(
                x(span["since"]),
                x(span["until"]),
                span["health"],
                datetime.fromisoformat(span["since"]),
                datetime.fromisoformat(span["until"]),
            )
            segments.append(segment)
        if hold["ended"] is None and segments:
            segments[-1]["end"] = None  # still held: "until now"
        return segments

    lanes = []
    for container in pod["containers"]:
        for hold in container["devices"]:
            lanes.append(
                {
                    "container": container["name"],
                    "hold": hold,
                    "href": f"/devices/{hold['id']}",
                    "label": hold["device_id"],
                    "resource": hold["resource"],
                    "node": hold["node"],
                    "segments": segments_of(hold),
                }
            )
    for hold in pod.get("dra_holds") or []:
        path = "/".join(pathseg(hold[key]) for key in ("driver", "pool", "device"))
        lanes.append(
            {
                "container": f"claim {hold['claim']}",
                "hold": hold,
                "href": f"/dra/devices/{path}",
                "label": hold["device"],
                "resource": f"{hold['driver']} · {hold['pool']}",
                "node": pod["node"],
                "segments": segments_of(hold),
            }
        )
    return {
        "width": width,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "middle": (start + (end - start) / 2).isoformat(),
        "running": pod["ended"] is None,
        "lanes": lanes,
    }
