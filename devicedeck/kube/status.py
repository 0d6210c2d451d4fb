"""The watcher's status, kept in service_state so every service process and page can show it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from devicedeck.config import KubeMode
from devicedeck.inventory.models import Setting
from devicedeck.kube.errors import KUBE_OFF_MESSAGE

STATUS_PREFIX = "kube/watch/"
WATCHED = ("nodes", "pods", "resourceslices", "resourceclaims")
# A watch re-opens at least every WATCH_TIMEOUT_MAX seconds and writes its status when it
# does; a status older than this means the process that wrote it is gone or stuck.
STALE_AFTER = timedelta(minutes=5)

# States a watch reports.
STARTING = "starting"
LISTING = "listing"
WATCHING = "watching"
BACKOFF = "backoff"
FORBIDDEN = "forbidden"
UNAVAILABLE = "unavailable"
STOPPED = "stopped"
WATCH_STATES = (STARTING, LISTING, WATCHING, BACKOFF, FORBIDDEN, UNAVAILABLE, STOPPED)


def write_status(session: Session, resource: str, value: dict[str, Any], now: datetime) -> None:
    """Insert or replace the status row of one watch, whichever process wrote it before."""
    dialect_insert = (
        postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    )
    statement = dialect_insert(Setting).values(
        key=STATUS_PREFIX + resource, value=value, updated_at=now
    )
    session.execute(
        statement.on_conflict_do_update(
            index_elements=["key"], set_={"value": value, "updated_at": now}
        )
    )


def cluster_status(
    session: Session, mode: KubeMode, problem: str | None, now: datetime
) -> dict[str, Any]:
    """What the cluster integration is doing: its mode and, per watched collection, its state."""
    if mode is KubeMode.OFF:
        return {
            "mode": mode.value,
            "enabled": False,
            "healthy": None,
            "problem": KUBE_OFF_MESSAGE,
            "watches": [],
        }
    if problem is not None:
        # Nothing runs in this process; rows another process wrote may be old, so none shown.
        return {
            "mode": mode.value,
            "enabled": True,
            "healthy": False,
            "problem": problem,
            "watches": [],
        }
    rows = {
        row.key.removeprefix(STATUS_PREFIX): row
        for row in session.scalars(
            select(Setting)
            .where(Setting.key.startswith(STATUS_PREFIX, autoescape=True))
            .order_by(Setting.key)
        )
    }
    watches = []
    for resource in WATCHED:
        row = rows.get(resource)
        value = dict(row.value) if row is not None else {"state": STARTING}
        stale = row is None or now - row.updated_at > STALE_AFTER
        watches.append(
            {
                "resource": resource,
                **value,
                "updated_at": row.updated_at.isoformat() if row is not None else None,
                "stale": stale,
            }
        )
    # DRA is optional in a cluster: an API group it does not serve is not a fault.
    healthy = all(
        w["state"] == WATCHING and not w["stale"]
        for w in watches
        if not (w["resource"].startswith("resource") and w["state"] == UNAVAILABLE)
    )
    return {
        "mode": mode.value,
        "enabled": True,
        "healthy": healthy,
        "problem": problem,
        "watches": watches,
    }


def watch_states(
    session: Session, mode: KubeMode, problem: str | None, now: datetime
) -> list[tuple[str, str]]:
    """Each watched collection with the state to export for it (none while cluster access is
    off or could not start). A status no process has renewed within STALE_AFTER reads as
    stopped: the process that was watching is gone, whatever it wrote last."""
    states = []
    for watch in cluster_status(session, mode, problem, now)["watches"]:
        gone = watch["stale"] and watch["updated_at"] is not None
        states.append((watch["resource"], STOPPED if gone else str(watch["state"])))
    return states
