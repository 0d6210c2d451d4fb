"""Secrets never reach the logs: a real `devicedeck serve` sending webhooks to URLs with a user,
a password and a key in the query, one receiver failing and one working, writes none of them
in any line, in either format; a setting with a bad value is named, never repeated."""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path

import httpx
import pytest
from agent.helpers import Service

from devicedeck.config import Settings, load_settings

from .conftest import wait_until
from .test_settings import run_with_settings
from .test_webhooks import DEADLINE, gpus
from .webhook_receiver import WebhookReceiver, running

REPO = Path(__file__).resolve().parents[2]
USER = "hookuser"
PASSWORD = "s3cret-pw-4e1f9"
KEY = "k3y-9a7b2c5d"
SECRETS = (PASSWORD, KEY, f"{USER}:{PASSWORD}")
RFC3339_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def with_credentials(receiver: WebhookReceiver) -> str:
    return f"http://{USER}:{PASSWORD}@127.0.0.1:{receiver.port}/hook?key={KEY}"


def post(service: Service, token: str, seq: int, health: str) -> None:
    answer = httpx.post(
        f"{service.url}/api/v1/ingest/listandwatch",
        json=gpus(seq, health),
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text


def check_every_line(output: str, log_format: str) -> None:
    """Each line a whole log line of its format, with an RFC 3339 time and an event."""
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines
    for line in lines:
        if log_format == "json":
            entry = json.loads(line)
            assert RFC3339_MS.fullmatch(entry["time"]), line
            assert entry["event"], line
        else:
            assert re.match(rf"time={RFC3339_MS.pattern} level=[A-Z]+ logger=\S+ ", line), line
            assert re.search(r" event=[a-z0-9_]+", line), line


@pytest.mark.parametrize(("log_format", "level"), [("json", "INFO"), ("text", "DEBUG")])
def test_webhook_credentials_never_reach_the_log(
    database_url: str, tmp_path: Path, log_format: str, level: str
) -> None:
    working = WebhookReceiver()
    failing = WebhookReceiver(answers=[500] * 1000)
    with running(working), running(failing):
        service = Service(database_url, tmp_path)
        service.env |= {
            "DEVICEDECK_LOG_FORMAT": log_format,
            "DEVICEDECK_LOG_LEVEL": level,
            "DEVICEDECK_WEBHOOK_URL": f"{with_credentials(working)},{with_credentials(failing)}",
            "DEVICEDECK_WEBHOOK_BACKOFF_MAX": "1",
        }
        token = service.create_token("node-1", "ingest", "read", node="node-1")
        service.start()
        try:
            post(service, token, 1, "Healthy")
            post(service, token, 2, "Unhealthy")
            wait_until(
                lambda: len(working.accepted()) == 1 and len(failing.all()) >= 3,
                timeout=DEADLINE,
                what="one message delivered, and three failed attempts at the other receiver",
            )
        finally:
            service.stop()
    output = (tmp_path / "service-1.log").read_text()
    # The credentials were used: sent as Basic auth, with the query.
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert working.accepted()[0].headers["Authorization"] == f"Basic {basic}"
    for secret in SECRETS:
        assert secret not in output, f"{secret!r} is in the log"
    check_every_line(output, log_format)
    # The sender said what it did, naming the receiver without its secrets.
    assert f"127.0.0.1:{working.port}/hook" in output
    assert "webhook_sent" in output and "webhook_failed" in output


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["migrate"]])
def test_a_bad_webhook_url_is_named_and_never_repeated(tmp_path: Path, command: list[str]) -> None:
    done = run_with_settings(
        command,
        DEVICEDECK_DATABASE_URL=f"sqlite:///{tmp_path / 'devicedeck.db'}",
        DEVICEDECK_WEBHOOK_URL=f"https://ok.example/hook, {USER}:{PASSWORD}@hooks.example/x",
    )
    assert done.returncode == 1, done.stderr
    assert "DEVICEDECK_WEBHOOK_URL" in done.stderr
    assert "entry 2 of 2 is not" in done.stderr
    assert PASSWORD not in done.stderr + done.stdout and "Traceback" not in done.stderr


# A value no setting accepts as it is: a number, a choice, a pattern, a URL, a list of
# networks, a template, all refuse it.
MARKED = "not-valid {x} because 5ecret-mark"
ACCEPT_ANY_TEXT = {"database_url", "kubeconfig", "proxy_admins", "webhook_receiver"}


@pytest.mark.parametrize("field", sorted(set(Settings.model_fields) - ACCEPT_ANY_TEXT))
def test_every_setting_with_a_bad_value_is_named_and_its_value_never_repeated(
    monkeypatch: pytest.MonkeyPatch, field: str
) -> None:
    for name in os.environ:
        if name.startswith("DEVICEDECK_"):
            monkeypatch.delenv(name)
    variable = f"DEVICEDECK_{field.upper()}"
    monkeypatch.setenv(variable, MARKED)
    if field == "proxy_user_header":
        monkeypatch.setenv("DEVICEDECK_PROXY_TRUSTED_CIDRS", "127.0.0.1/32")
    with pytest.raises(SystemExit) as stopped:
        load_settings()
    message = str(stopped.value)
    assert variable in message
    assert "5ecret" not in message, message


def test_the_settings_any_text_is_good_for_are_the_ones_left_out() -> None:
    """A new setting that takes any text must join ACCEPT_ANY_TEXT knowingly."""
    for field in ACCEPT_ANY_TEXT:
        assert Settings(**{field: MARKED}).model_dump()[field] == MARKED
