"""Webhook notifications through the real ingest API to a real local HTTP receiver: an alert's
firing and resolved messages in Alertmanager's webhook format, retries after failures, and
nothing written to the outbox when no URL is configured."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from agent.helpers import free_port
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from devicedeck.config import Settings, load_settings
from devicedeck.inventory.models import Notification

from .conftest import GPU, Api, MakeApi, dev, held, listandwatch, pod, podresources, wait_until
from .webhook_receiver import WebhookReceiver, running

# Generous: the sender polls every second, and retries wait 1, 2, 4 s (with jitter).
DEADLINE = 60.0
NOT_ENDED = "0001-01-01T00:00:00Z"
NOTIFICATIONS_DOC = Path(__file__).resolve().parents[2] / "docs" / "notifications.md"


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with running(WebhookReceiver()) as receiver:
        yield receiver


def wait_for(receiver: WebhookReceiver, count: int, what: str) -> None:
    wait_until(lambda: len(receiver.accepted()) >= count, timeout=DEADLINE, what=what)


def gpus(seq: int, gpu0: str = "Healthy", *, with_gpu1: bool = True) -> dict:
    devices = [dev("gpu-0", gpu0)] + ([dev("gpu-1")] if with_gpu1 else [])
    return listandwatch("node-1", devices, seq)


def parse(at: str) -> datetime:
    return datetime.fromisoformat(at.replace("Z", "+00:00"))


def outbox(session_factory: sessionmaker[Session]) -> list[tuple[str, str, int]]:
    """(status, state, attempts) of every outbox row, in order."""
    with session_factory() as session:
        rows = session.execute(
            select(Notification.status, Notification.state, Notification.attempts).order_by(
                Notification.id
            )
        )
        return [(status, state, attempts) for status, state, attempts in rows]


def test_a_device_turning_unhealthy_then_healthy_fires_then_resolves(
    make_api: MakeApi, receiver: WebhookReceiver
) -> None:
    api = make_api(
        webhook_url=receiver.url,
        webhook_receiver="gpu-team",
        public_url="https://devicedeck.example",
    )
    api.ingest_listandwatch(gpus(1))
    trainer = pod("trainer", namespace="ml", containers={"main": [held(GPU, "gpu-0")]})
    api.ingest_podresources(podresources("node-1", [trainer], 1))
    assert receiver.all() == [], "a healthy device alerts no one"

    api.ingest_listandwatch(gpus(2, "Unhealthy"))
    wait_for(receiver, 1, "the firing message")
    api.ingest_listandwatch(gpus(3, "Healthy"))
    wait_for(receiver, 2, "the resolved message")

    firing, resolved = receiver.accepted()
    labels = {
        "alertname": "DevicedeckDeviceUnhealthy",
        "severity": "warning",
        "node": "node-1",
        "resource": GPU,
        "device": "gpu-0",
        "namespace": "ml",
        "pod": "trainer",
    }
    assert firing.message["version"] == "4"
    assert firing.message["status"] == "firing"
    assert firing.message["receiver"] == "gpu-team"
    assert firing.message["externalURL"] == "https://devicedeck.example"
    assert firing.alert["status"] == "firing"
    assert firing.alert["labels"] == labels
    assert firing.alert["endsAt"] == NOT_ENDED
    assert "gpu-0" in firing.alert["annotations"]["summary"]
    device = api.device("node-1", "gpu-0")
    assert firing.alert["generatorURL"] == f"https://devicedeck.example/devices/{device['id']}"

    assert resolved.message["status"] == "resolved"
    assert resolved.alert["labels"] == labels
    assert resolved.alert["fingerprint"] == firing.alert["fingerprint"]
    assert resolved.message["groupKey"] == firing.message["groupKey"]
    assert resolved.alert["startsAt"] == firing.alert["startsAt"]
    assert parse(resolved.alert["endsAt"]) > parse(firing.alert["startsAt"])
    health_events = api.events(kind="health_changed", node="node-1")
    assert {parse(e["at"]) for e in health_events} == {
        parse(firing.alert["startsAt"]),
        parse(resolved.alert["endsAt"]),
    }
    assert firing.message["dedupeKey"] != resolved.message["dedupeKey"]
    assert firing.headers["Idempotency-Key"] == firing.message["dedupeKey"]

    # A later alert arrives after the earlier two, and neither of those came again.
    api.ingest_listandwatch(gpus(4, with_gpu1=False))
    wait_for(receiver, 3, "the removal's message")
    assert receiver.alerts() == [
        ("DevicedeckDeviceUnhealthy", "gpu-0", "firing"),
        ("DevicedeckDeviceUnhealthy", "gpu-0", "resolved"),
        ("DevicedeckDeviceRemoved", "gpu-1", "firing"),
    ]
    assert len(receiver.all()) == 3
    removed = receiver.accepted()[2].alert
    assert "namespace" not in removed["labels"], "no pod held gpu-1"


def test_an_unhealthy_device_removed_ends_its_unhealthy_alert(
    make_api: MakeApi, receiver: WebhookReceiver
) -> None:
    api = make_api(webhook_url=receiver.url)
    api.ingest_listandwatch(gpus(1, "Unhealthy"))
    wait_for(receiver, 1, "the firing message")
    api.ingest_listandwatch(listandwatch("node-1", [dev("gpu-1")], 2))
    wait_for(receiver, 3, "the removal's messages")
    assert receiver.alerts() == [
        ("DevicedeckDeviceUnhealthy", "gpu-0", "firing"),
        ("DevicedeckDeviceRemoved", "gpu-0", "firing"),
        ("DevicedeckDeviceUnhealthy", "gpu-0", "resolved"),
    ]
    firing, _, resolved = receiver.accepted()
    assert resolved.alert["fingerprint"] == firing.alert["fingerprint"]
    assert resolved.alert["startsAt"] == firing.alert["startsAt"]
    # /metrics agrees: no unhealthy device on the node any more.
    metrics = api.client.get("/metrics").text
    assert f'devicedeck_node_devices{{node="node-1",resource="{GPU}",health="Unhealthy"}} 0' in (
        metrics
    )


def test_a_failing_receiver_gets_the_message_when_it_recovers(
    make_api: MakeApi, session_factory: sessionmaker[Session]
) -> None:
    with running(WebhookReceiver(answers=[500, 503, 500])) as receiver:
        api = make_api(webhook_url=receiver.url)
        api.ingest_listandwatch(gpus(1))
        api.ingest_listandwatch(gpus(2, "Unhealthy"))
        wait_for(receiver, 1, "the message, after three failures")
        attempts = receiver.all()
        assert [r.status for r in attempts] == [500, 503, 500, 200]
        assert len({r.message["dedupeKey"] for r in attempts}) == 1, "one key for every attempt"
        marked = [("firing", "delivered", 4)]
        wait_until(lambda: outbox(session_factory) == marked, what="the row marked delivered")


def test_a_refused_message_is_not_retried_and_holds_up_nothing(
    make_api: MakeApi, session_factory: sessionmaker[Session]
) -> None:
    with running(WebhookReceiver(answers=[400])) as receiver:
        api = make_api(webhook_url=receiver.url)
        api.ingest_listandwatch(gpus(1))
        api.ingest_listandwatch(gpus(2, "Unhealthy"))
        api.ingest_listandwatch(gpus(3, "Healthy"))
        wait_for(receiver, 1, "the message after the refused one")
        assert [r.status for r in receiver.all()] == [400, 200]
        assert receiver.alerts() == [("DevicedeckDeviceUnhealthy", "gpu-0", "resolved")]
        marked = [("firing", "rejected", 1), ("resolved", "delivered", 1)]
        wait_until(lambda: outbox(session_factory) == marked, what="both rows marked")


def test_every_url_gets_every_message(make_api: MakeApi) -> None:
    with running(WebhookReceiver(answers=[500])) as first, running(WebhookReceiver()) as second:
        api = make_api(webhook_url=f"{first.url}, {second.url}")
        api.ingest_listandwatch(gpus(1))
        api.ingest_listandwatch(gpus(2, "Unhealthy"))
        wait_for(first, 1, "the first URL's message, after a failure")
        wait_for(second, 1, "the second URL's message")
        assert (
            first.alerts() == second.alerts() == [("DevicedeckDeviceUnhealthy", "gpu-0", "firing")]
        )
        assert len(second.all()) == 1, "one failing receiver holds up no other"


def test_a_stale_node_fires_and_resolves_when_it_reports_again(
    make_api: MakeApi, receiver: WebhookReceiver
) -> None:
    api = make_api(webhook_url=receiver.url, stale_after=1.0)
    api.ingest_listandwatch(gpus(1))
    wait_for(receiver, 1, "the stale node's message")
    api.ingest_listandwatch(gpus(2))
    wait_for(receiver, 2, "the node's recovery")
    # On a slow machine the node may fall silent for another second before the checks below
    # end, and fire again: the first outage is the one this test made.
    firing, resolved = receiver.accepted()[:2]
    assert receiver.alerts()[:2] == [
        ("DevicedeckNodeStale", "node-1", "firing"),
        ("DevicedeckNodeStale", "node-1", "resolved"),
    ]
    assert firing.alert["labels"] == {
        "alertname": "DevicedeckNodeStale",
        "severity": "warning",
        "node": "node-1",
    }
    stale = min(api.events(kind="node_stale"), key=lambda event: parse(event["at"]))
    seen = min(api.events(kind="node_seen"), key=lambda event: parse(event["at"]))
    assert parse(firing.alert["startsAt"]) == parse(stale["at"])
    assert resolved.alert["startsAt"] == firing.alert["startsAt"]
    assert parse(resolved.alert["endsAt"]) == parse(seen["at"])


def test_without_a_webhook_url_nothing_is_queued(
    api: Api, session_factory: sessionmaker[Session]
) -> None:
    api.ingest_listandwatch(gpus(1))
    api.ingest_listandwatch(gpus(2, "Unhealthy"))
    api.ingest_listandwatch(gpus(3, with_gpu1=False))
    assert len(api.events(kind="health_changed")) == 2
    assert len(api.events(kind="device_removed")) == 1
    with session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Notification)) == 0


@pytest.mark.parametrize(
    ("given", "rule"),
    [
        ("ftp://hooks.example.com/x", "must be an http:// or https:// URL"),
        ("https://a.example/x,not a url", "must be an http:// or https:// URL"),
        ("https://a.example/x, https://a.example/x", "lists the same URL twice"),
    ],
)
def test_a_bad_webhook_url_stops_the_service_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, given: str, rule: str
) -> None:
    monkeypatch.setenv("DEVICEDECK_WEBHOOK_URL", given)
    with pytest.raises(SystemExit) as stopped:
        load_settings()
    assert "DEVICEDECK_WEBHOOK_URL" in str(stopped.value) and rule in str(stopped.value)


def test_webhook_urls_are_read_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVICEDECK_WEBHOOK_URL", " https://a.example/hook , http://b.example:9095")
    assert Settings().webhook_urls == ["https://a.example/hook", "http://b.example:9095"]
    monkeypatch.setenv("DEVICEDECK_WEBHOOK_URL", "")
    assert Settings().webhook_urls == []


def test_the_documented_receiver_gets_the_alerts(make_api: MakeApi, tmp_path: Path) -> None:
    """docs/notifications.md's example receiver, run as written but on a free port."""
    [example] = re.findall(r"```python\n(.*?)```", NOTIFICATIONS_DOC.read_text(), re.DOTALL)
    assert '("0.0.0.0", 9095)' in example
    port = free_port()
    script = tmp_path / "receiver.py"
    script.write_text(example.replace('("0.0.0.0", 9095)', f'("127.0.0.1", {port})'))
    output = tmp_path / "receiver.out"
    with output.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-u", str(script)], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        api = make_api(webhook_url=f"http://127.0.0.1:{port}/")
        api.ingest_listandwatch(gpus(1))
        api.ingest_listandwatch(gpus(2, "Unhealthy"))
        api.ingest_listandwatch(gpus(3, "Healthy"))
        summary = f"Device gpu-0 ({GPU}) on node node-1 is unhealthy"
        printed = [f"firing {summary}", f"resolved {summary}"]
        wait_until(
            lambda: (
                [line for line in output.read_text().splitlines() if summary in line] == printed
            ),
            timeout=DEADLINE,
            what="the receiver to print both alerts",
        )
    finally:
        process.terminate()
        process.wait(timeout=30)
