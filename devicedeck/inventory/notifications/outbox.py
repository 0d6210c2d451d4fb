"""The notification outbox as its sender sees it: the next rows owed to a target, the
Alertmanager webhook message of a row, marking the outcome, and pruning."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.orm import Session

from devicedeck.inventory.models import Notification
from devicedeck.inventory.notifications.alerts import DELIVERED, PENDING, REJECTED, RESOLVED

# Alertmanager's endsAt for an alert that has not ended: Go's zero time.
NOT_ENDED = "0001-01-01T00:00:00Z"
ERROR_MAX = 500


def pending_notifications(session: Session, target: str, limit: int) -> list[Notification]:
    """The target's undelivered rows, oldest first: a receiver must see an alert's firing
    before its resolved notification."""
    return list(
        session.scalars(
            select(Notification)
            .where(Notification.target == target, Notification.state == PENDING)
            .order_by(Notification.id)
            .limit(limit)
        )
    )


def _finish(session: Session, notification_id: int, state: str, now: datetime, **more: Any) -> None:
    session.execute(
        update(Notification)
        .where(Notification.id == notification_id, Notification.state == PENDING)
        .values(state=state, done_at=now, attempts=Notification.attempts + 1, **more)
    )


def mark_delivered(session: Session, notification_id: int, now: datetime) -> None:
    _finish(session, notification_id, DELIVERED, now, last_error=None)


def mark_rejected(session: Session, notification_id: int, now: datetime, error: str) -> None:
    """The receiver refused the row for good (a 4xx other than 408 and 429)."""
    _finish(session, notification_id, REJECTED, now, last_error=error[:ERROR_MAX])


def record_failure(session: Session, notification_id: int, error: str) -> None:
    """A failed attempt; the row stays pending for the next one."""
    session.execute(
        update(Notification)
        .where(Notification.id == notification_id)
        .values(attempts=Notification.attempts + 1, last_error=error[:ERROR_MAX])
    )


def prune_notifications(session: Session, before: datetime, targets: Sequence[str]) -> int:
    """Delete rows done before `before`, and pending rows as old for targets no longer
    configured (no one will send them); returns how many."""
    done = and_(Notification.state != PENDING, Notification.done_at < before)
    orphaned = and_(
        Notification.state == PENDING,
        Notification.created_at < before,
        Notification.target.not_in(list(targets)),
    )
    result = session.execute(delete(Notification).where(or_(done, orphaned)))
    return int(getattr(result, "rowcount", 0) or 0)


def alertmanager_message(
    notification: Notification, *, receiver: str, external_url: str
) -> dict[str, Any]:
    """The row as Alertmanager's webhook receiver message (version 4): one group of one alert.

    `dedupeKey` is Devicedeck's own addition: the same for every attempt at this row, so a
    receiver can drop the repeat that at-least-once delivery may bring."""
    labels: dict[str, str] = dict(notification.labels)
    identity = {k: v for k, v in labels.items() if k in ("alertname", "node", "resource", "device")}
    group = ", ".join(f'{key}="{value}"' for key, value in sorted(identity.items()))
    ends_at = notification.ends_at if notification.status == RESOLVED else None
    alert = {
        "status": notification.status,
        "labels": labels,
        "annotations": dict(notification.annotations),
        "startsAt": _rfc3339(notification.starts_at),
        "endsAt": _rfc3339(ends_at) if ends_at else NOT_ENDED,
        "generatorURL": notification.generator_url or "",
        "fingerprint": notification.fingerprint,
    }
    return {
        "version": "4",
        "groupKey": f"{{}}:{{{group}}}",
        "truncatedAlerts": 0,
        "status": notification.status,
        "receiver": receiver,
        "groupLabels": identity,
        "commonLabels": labels,
        "commonAnnotations": dict(notification.annotations),
        "externalURL": external_url,
        "alerts": [alert],
        "dedupeKey": notification.dedupe_key,
    }


def _rfc3339(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")
