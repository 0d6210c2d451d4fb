"""Webhook delivery across `devicedeck serve` processes: notifications queued while the
receiver is down are sent after a restart, and two replicas on one database send each message
once, the second taking over when the first stops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from agent.helpers import Service
from sqlalchemy.orm import Session, sessionmaker

from .conftest import wait_until
from .test_replicas import leading
from .test_webhooks import DEADLINE, gpus, outbox, wait_for
from .webhook_receiver import WebhookReceiver, running


def post(service: Service, token: str, snapshot: dict[str, Any]) -> None:
    answer = httpx.post(
        f"{service.url}/api/v1/ingest/listandwatch",
        json=snapshot,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text


def all_delivered(session_factory: sessionmaker[Session], count: int) -> bool:
    rows = outbox(session_factory)
    return len(rows) == count and all(state == "delivered" for _, state, _ in rows)


def test_notifications_queued_while_the_receiver_is_down_are_sent_after_a_restart(
    database_url: str, tmp_path: Path, session_factory: sessionmaker[Session]
) -> None:
    receiver = WebhookReceiver().reserve()  # nothing listens there yet
    service = Service(database_url, tmp_path)
    service.env["DEVICEDECK_WEBHOOK_URL"] = receiver.url
    service.start()
    try:
        token = service.create_token("node-1", "ingest", "read", node="node-1")
        post(service, token, gpus(1))
        post(service, token, gpus(2, "Unhealthy"))
        wait_until(
            lambda: (
                [(s, st) for s, st, tries in outbox(session_factory) if tries >= 1]
                == [("firing", "pending")]
            ),
            timeout=DEADLINE,
            what="a failed attempt at the firing message",
        )
        post(service, token, gpus(3, "Healthy"))
        service.stop()

        receiver.start()
        service.start()
        wait_for(receiver, 2, "both messages, sent by the restarted service")
        assert receiver.alerts() == [
            ("DevicedeckDeviceUnhealthy", "gpu-0", "firing"),
            ("DevicedeckDeviceUnhealthy", "gpu-0", "resolved"),
        ]
        wait_until(lambda: all_delivered(session_factory, 2), what="both rows marked delivered")
        assert len(receiver.all()) == 2
    finally:
        service.stop()
        receiver.stop()


# Replicas share PostgreSQL in production; two processes on one SQLite file are no setup
# anyone runs, and each run of this test takes minutes.
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_two_replicas_send_each_message_once(
    database_url: str, tmp_path: Path, session_factory: sessionmaker[Session]
) -> None:
    with running(WebhookReceiver()) as receiver:
        replicas = [Service(database_url, tmp_path), Service(database_url, tmp_path)]
        for replica in replicas:
            replica.env["DEVICEDECK_WEBHOOK_URL"] = receiver.url
            replica.start()
        try:
            token = replicas[0].create_token("node-1", "ingest", "read", node="node-1")
            wait_until(
                lambda: sum(leading(r) for r in replicas) == 1, timeout=DEADLINE, what="a leader"
            )
            # Changes through either replica; the leader sends them all.
            post(replicas[0], token, gpus(1))
            post(replicas[0], token, gpus(2, "Unhealthy"))
            post(replicas[1], token, gpus(3, "Healthy"))
            post(replicas[0], token, gpus(4, with_gpu1=False))
            wait_for(receiver, 3, "three messages")
            wait_until(lambda: all_delivered(session_factory, 3), what="three rows delivered")

            leader = next(r for r in replicas if leading(r))
            follower = next(r for r in replicas if r is not leader)
            leader.stop()
            post(follower, token, gpus(5))
            wait_for(receiver, 4, "the message sent by the replica that took over")
            assert receiver.alerts() == [
                ("DevicedeckDeviceUnhealthy", "gpu-0", "firing"),
                ("DevicedeckDeviceUnhealthy", "gpu-0", "resolved"),
                ("DevicedeckDeviceRemoved", "gpu-1", "firing"),
                ("DevicedeckDeviceRemoved", "gpu-1", "resolved"),
            ]
            wait_until(lambda: all_delivered(session_factory, 4), what="four rows delivered")
            assert len(receiver.all()) == 4, "a message was sent twice"
            assert len({r.message["dedupeKey"] for r in receiver.all()}) == 4
        finally:
            for replica in replicas:
                replica.stop()
