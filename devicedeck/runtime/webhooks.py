"""Webhook notifications: the outbox's rows sent to each `DEVICEDECK_WEBHOOK_URL`.

Rows are written with the events that cause them (devicedeck/inventory/notifications/alerts.py);
here the leading process sends them, one target at a time in the order they were written, and marks
each one sent. Delivery is at least once: a row is marked only after its receiver answered 2xx, so a
process that stops in between sends it again after it, or another replica, leads; every
attempt at a row carries the same dedupe key. A receiver that fails (5xx, 408, 429, no
answer) holds up its own target only, retried with exponential back-off.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

import httpx
from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from devicedeck import __version__
from devicedeck.clock import utcnow
from devicedeck.config import Settings
from devicedeck.db import EventLoopDatabase, write_session
from devicedeck.inventory.models import Notification
from devicedeck.inventory.notifications.alerts import OUTBOX_INFO_KEY, OutboxConfig, target_key
from devicedeck.inventory.notifications.outbox import (
    alertmanager_message,
    mark_delivered,
    mark_rejected,
    pending_notifications,
    prune_notifications,
    record_failure,
)
from devicedeck.retry import Backoff
from devicedeck.runtime.background import BackgroundTasks

log = logging.getLogger(__name__)

# How often an idle sender looks for new rows: alerts are not worth a busier loop.
POLL_SECONDS = 1.0
BATCH = 50
FIRST_RETRY_SECONDS = 1.0
PRUNE_EVERY_SECONDS = 3600.0
# Answers worth retrying among the 4xx: the receiver was busy, not refusing the message.
RETRYABLE_4XX = frozenset({408, 425, 429})


@dataclass(frozen=True)
class WebhookTarget:
    url: str

    @property
    def key(self) -> str:
        return target_key(self.url)

    @property
    def shown(self) -> str:
        """The URL for logs: no credentials, no query."""
        parts = urlsplit(self.url)
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{parts.hostname}{port}{parts.path}"


def configure_outbox(
    settings: Settings,
    factory: sessionmaker[Session],
    event_loop_database: EventLoopDatabase | None,
) -> None:
    """With webhook URLs set, every session of this process writes outbox rows with the
    events it writes; without, none does."""
    if not settings.webhook_urls:
        return
    config = OutboxConfig(
        targets=tuple(WebhookTarget(url).key for url in settings.webhook_urls),
        public_url=settings.public_url,
    )
    factory.configure(info={OUTBOX_INFO_KEY: config})
    if event_loop_database is not None:
        event_loop_database.sessions.configure(info={OUTBOX_INFO_KEY: config})


def start_webhook_senders(app: FastAPI, tasks: BackgroundTasks) -> None:
    """Background starter: one sender per URL and the pruner, on the leading process only."""
    settings: Settings = app.state.settings
    for index, url in enumerate(settings.webhook_urls):
        sender = WebhookSender(app, settings, WebhookTarget(url))
        tasks.start_once(sender.run, name=f"webhook-sender-{index}")
    tasks.start_once(lambda: prune_forever(app, settings), name="webhook-prune")


class WebhookSender:
    def __init__(self, app: FastAPI, settings: Settings, target: WebhookTarget) -> None:
        self.app = app
        self.settings = settings
        self.target = target
        self.backoff = Backoff(FIRST_RETRY_SECONDS, settings.webhook_backoff_max)

    @property
    def factory(self) -> sessionmaker[Session]:
        factory: sessionmaker[Session] = self.app.state.session_factory
        return factory

    async def run(self) -> None:
        headers = {"User-Agent": f"devicedeck/{__version__}"}
        async with httpx.AsyncClient(
            timeout=self.settings.webhook_timeout, headers=headers
        ) as client:
            while True:
                try:
                    rows = await asyncio.to_thread(self._pending)
                    sent_all = await self._send_in_order(client, rows)
                except Exception:
                    log.exception(
                        "webhook sender for %s failed; will retry",
                        self.target.shown,
                        extra={"event": "webhook_sender_failed"},
                    )
                    sent_all = False
                if not sent_all:
                    await asyncio.sleep(self.backoff.next_delay())
                elif len(rows) < BATCH:
                    await asyncio.sleep(POLL_SECONDS)

    def _pending(self) -> list[Notification]:
        with self.factory() as session:
            return pending_notifications(session, self.target.key, BATCH)

    async def _send_in_order(self, client: httpx.AsyncClient, rows: list[Notification]) -> bool:
        """Sends rows until one fails; False if one did, and the rest wait their turn."""
        for row in rows:
            if not await self._send(client, row):
                return False
            self.backoff.reset()
        return True

    async def _send(self, client: httpx.AsyncClient, row: Notification) -> bool:
        message = alertmanager_message(
            row,
            receiver=self.settings.webhook_receiver,
            external_url=self.settings.public_url or "",
        )
        try:
            answer = await client.post(
                self.target.url, json=message, headers={"Idempotency-Key": row.dedupe_key}
            )
        except httpx.HTTPError as e:
            error = f"{type(e).__name__}: {e}"
        else:
            if answer.is_success:
                await asyncio.to_thread(self._mark_delivered, row.id)
                log.info(
                    "webhook sent",
                    extra={
                        "event": "webhook_sent",
                        "target": self.target.shown,
                        "alert": row.labels.get("alertname"),
                        "status": row.status,
                    },
                )
                return True
            error = f"HTTP {answer.status_code}: {answer.text[:200]}"
            if answer.is_client_error and answer.status_code not in RETRYABLE_4XX:
                await asyncio.to_thread(self._mark_rejected, row.id, error)
                log.error(
                    "webhook refused, not retried",
                    extra={
                        "event": "webhook_refused",
                        "target": self.target.shown,
                        "id": row.id,
                        "error": error,
                    },
                )
                return True
        await asyncio.to_thread(self._record_failure, row.id, error)
        log.warning(
            "webhook failed, will retry",
            extra={
                "event": "webhook_failed",
                "target": self.target.shown,
                "id": row.id,
                "attempt": row.attempts + 1,
                "error": error,
            },
        )
        return False

    def _mark_delivered(self, notification_id: int) -> None:
        with write_session(self.factory) as session:
            mark_delivered(session, notification_id, utcnow())

    def _mark_rejected(self, notification_id: int, error: str) -> None:
        with write_session(self.factory) as session:
            mark_rejected(session, notification_id, utcnow(), error)

    def _record_failure(self, notification_id: int, error: str) -> None:
        with write_session(self.factory) as session:
            record_failure(session, notification_id, error)


async def prune_forever(app: FastAPI, settings: Settings) -> None:
    targets = [WebhookTarget(url).key for url in settings.webhook_urls]
    while True:
        try:
            await asyncio.to_thread(_prune_once, app.state.session_factory, settings, targets)
        except Exception:
            log.exception(
                "pruning sent notifications failed; will retry",
                extra={"event": "notifications_prune_failed"},
            )
        await asyncio.sleep(PRUNE_EVERY_SECONDS)


def _prune_once(factory: sessionmaker[Session], settings: Settings, targets: list[str]) -> None:
    before = utcnow() - timedelta(days=settings.webhook_retention_days)
    with write_session(factory) as session:
        pruned = prune_notifications(session, before, targets)
    if pruned:
        log.info(
            "pruned old notifications", extra={"event": "notifications_pruned", "count": pruned}
        )
