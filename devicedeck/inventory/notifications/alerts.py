"""Alerts from the change log: which events start or end an alert, and the outbox rows that
carry them to webhook targets, written in the event's own transaction.

Nothing here runs unless the session says where notifications go (`OUTBOX_INFO_KEY` in its
`info`, set by the service when a webhook URL is configured): with none, ingest pays a dict
lookup per written event log.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from devicedeck.inventory.fields import UNHEALTHY
from devicedeck.inventory.models import Allocation, Notification, table_of

OUTBOX_INFO_KEY = "devicedeck_outbox"

DEVICE_UNHEALTHY = "DevicedeckDeviceUnhealthy"
DEVICE_REMOVED = "DevicedeckDeviceRemoved"
NODE_STALE = "DevicedeckNodeStale"
ALERT_NAMES = (DEVICE_UNHEALTHY, DEVICE_REMOVED, NODE_STALE)

FIRING = "firing"
RESOLVED = "resolved"
PENDING = "pending"
DELIVERED = "delivered"
REJECTED = "rejected"

# Events that may start or end an alert; every other kind is skipped before any work.
ALERTING_KINDS = frozenset(
    {"health_changed", "device_added", "device_removed", "device_reappeared"}
    | {"node_stale", "node_seen"}
)

_outbox = table_of(Notification)


@dataclass(frozen=True)
class OutboxConfig:
    """Where notifications go: the targets' keys (`target_key` of each URL), and the service's
    public address for links back to it."""

    targets: tuple[str, ...]
    public_url: str | None = None


def target_key(url: str) -> str:
    """What the outbox keeps of a webhook URL: a hash, since a URL may carry a credential."""
    return hashlib.sha256(url.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Transition:
    """An alert starting (firing) or ending (resolved), as one event shows it."""

    alertname: str
    status: str
    at: datetime
    node: str
    resource: str | None
    device: str | None
    device_pk: int | None
    summary: str
    description: str
    # When the alert began, if the event says so (a node's outage); else the outbox's firing row
    # or the event's own time.
    started: datetime | None = None
    # A resolution sent only when the alert is firing: a device removed ends its Unhealthy
    # alert, if it had one.
    only_if_firing: bool = False

    def identity(self) -> dict[str, str]:
        labels = {"alertname": self.alertname, "node": self.node}
        if self.resource is not None and self.device is not None:
            labels |= {"resource": self.resource, "device": self.device}
        return labels

    def fingerprint(self) -> str:
        return fingerprint_of(self.identity())


def fingerprint_of(identity: dict[str, str]) -> str:
    """The same for an alert's firing and its resolved notification: it hashes only the labels
    that name what the alert is about, not the pod that happens to hold the device."""
    encoded = json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()[:16]


def transitions_of(rows: list[dict[str, Any]]) -> list[Transition]:
    """The alert transitions among a change's event rows, in their order."""
    found: list[Transition] = []
    for row in rows:
        kind = row["kind"]
        if kind not in ALERTING_KINDS:
            continue
        transition = _transition(kind, row)
        if transition is not None:
            found.append(transition)
        if kind == "device_removed":
            # A removed device is no longer an unhealthy one on its node: /metrics stops
            # counting it, and so does its Unhealthy alert.
            found.append(
                Transition(
                    DEVICE_UNHEALTHY,
                    RESOLVED,
                    row["at"],
                    row["node"],
                    row["resource"],
                    row["device_id"],
                    row["device_pk"],
                    summary=f"Device {row['device_id']} ({row['resource']}) on node "
                    f"{row['node']} is unhealthy",
                    description="The device was removed.",
                    only_if_firing=True,
                )
            )
    return found


def _transition(kind: str, row: dict[str, Any]) -> Transition | None:
    before, after = row["before"] or {}, row["after"] or {}
    node, at = row["node"], row["at"]
    if kind == "node_stale":
        return Transition(
            NODE_STALE,
            FIRING,
            at,
            node,
            None,
            None,
            None,
            summary=f"Node {node} stopped reporting",
            description=f"No snapshot from its agent since {before.get('last_seen', 'unknown')}.",
        )
    if kind == "node_seen":
        stale_since = before.get("stale_since")
        return Transition(
            NODE_STALE,
            RESOLVED,
            at,
            node,
            None,
            None,
            None,
            summary=f"Node {node} stopped reporting",
            description="Its agent reports again.",
            started=datetime.fromisoformat(stale_since) if stale_since else None,
        )
    device: dict[str, Any] = {
        "node": node,
        "resource": row["resource"],
        "device": row["device_id"],
        "device_pk": row["device_pk"],
    }
    about = f"Device {row['device_id']} ({row['resource']}) on node {node}"
    if kind in ("health_changed", "device_added"):
        was, now = before.get("health"), after.get("health")
        reported = after.get("raw_health")
        if now == UNHEALTHY and was != UNHEALTHY:
            return Transition(
                DEVICE_UNHEALTHY,
                FIRING,
                at,
                **device,
                summary=f"{about} is unhealthy",
                description=f"Reported health: {reported!r}.",
            )
        if was == UNHEALTHY and now != UNHEALTHY:
            return Transition(
                DEVICE_UNHEALTHY,
                RESOLVED,
                at,
                **device,
                summary=f"{about} is unhealthy",
                description=f"Reported health: {reported!r}.",
            )
        return None
    if kind == "device_removed":
        return Transition(
            DEVICE_REMOVED,
            FIRING,
            at,
            **device,
            summary=f"{about} was removed",
            description="Its device plugin no longer lists it.",
        )
    # device_reappeared
    return Transition(
        DEVICE_REMOVED,
        RESOLVED,
        at,
        **device,
        summary=f"{about} was removed",
        description="Its device plugin lists it again.",
    )


def outbox_of(info: Mapping[str, Any]) -> OutboxConfig | None:
    """Where a session's notifications go, by its `info`; None when nowhere."""
    config: OutboxConfig | None = info.get(OUTBOX_INFO_KEY)
    return config if config is not None and config.targets else None


def write_outbox(session: Session, rows: list[dict[str, Any]]) -> None:
    """Queue a notification to every target for each alert transition among `rows`, in the
    session's transaction; nothing when the session has no targets."""
    config = outbox_of(session.info)
    if config is None:
        return
    transitions = transitions_of(rows)
    if not transitions:
        return
    holders = _holders(session, [t.device_pk for t in transitions if t.device_pk is not None])
    outbox: list[dict[str, Any]] = []
    # Alerts fired by this change, not yet in the table.
    fired: dict[str, tuple[dict[str, str], datetime]] = {}
    for transition in transitions:
        fingerprint = transition.fingerprint()
        labels = transition.identity()
        labels["severity"] = "warning"
        starts_at = transition.started or transition.at
        ends_at = None
        if transition.status == RESOLVED:
            ends_at = transition.at
            opened = fired.pop(fingerprint, None) or _open_alert(session, fingerprint)
            if opened is not None:
                labels, starts_at = dict(opened[0]), opened[1]
            elif transition.only_if_firing:
                continue
        else:
            if transition.device_pk in holders:
                namespace, pod = holders[transition.device_pk]
                labels |= {"namespace": namespace, "pod": pod}
            fired[fingerprint] = (labels, starts_at)
        dedupe = f"{fingerprint}|{transition.status}|{transition.at.isoformat()}"
        for target in config.targets:
            outbox.append(
                {
                    "created_at": transition.at,
                    "target": target,
                    "dedupe_key": hashlib.sha256(dedupe.encode()).hexdigest()[:32],
                    "fingerprint": fingerprint,
                    "status": transition.status,
                    "labels": labels,
                    "annotations": {
                        "summary": transition.summary,
                        "description": transition.description,
                    },
                    "generator_url": _link(config.public_url, transition),
                    "starts_at": starts_at,
                    "ends_at": ends_at,
                    "state": PENDING,
                    "attempts": 0,
                }
            )
    session.execute(insert(_outbox), outbox)


def _holders(session: Session, device_pks: list[int]) -> dict[int, tuple[str, str]]:
    """The pod holding each device now, for the firing alert's labels."""
    if not device_pks:
        return {}
    found: dict[int, tuple[str, str]] = {}
    for device_pk, namespace, pod in session.execute(
        select(Allocation.device_pk, Allocation.namespace, Allocation.pod)
        .where(Allocation.device_pk.in_(device_pks), Allocation.ended.is_(None))
        .order_by(Allocation.id)
    ):
        found.setdefault(device_pk, (namespace, pod))
    return found


def _open_alert(session: Session, fingerprint: str) -> tuple[dict[str, str], datetime] | None:
    """The labels and start of the firing notification a resolved one ends, if that is the
    alert's latest notification."""
    latest = session.execute(
        select(_outbox.c.status, _outbox.c.labels, _outbox.c.starts_at)
        .where(_outbox.c.fingerprint == fingerprint)
        .order_by(_outbox.c.id.desc())
        .limit(1)
    ).first()
    if latest is None or latest.status != FIRING:
        return None
    return dict(latest.labels), latest.starts_at


def _link(public_url: str | None, transition: Transition) -> str | None:
    if not public_url:
        return None
    base = public_url.rstrip("/")
    if transition.device_pk is not None:
        return f"{base}/devices/{transition.device_pk}"
    return f"{base}/nodes/{quote(transition.node, safe='')}"
