"""Logs of a real `devicedeck serve`: with DEVICEDECK_LOG_FORMAT=json every line is one JSON
object with each field a key; every request has an access line naming its route template and
who asked, and no token ever reaches the log."""

from __future__ import annotations

import ast
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent.helpers import Service
from ui.signin import sign_in

from .conftest import dev, listandwatch

APP = Path(__file__).resolve().parents[2] / "devicedeck"
BAD_TOKEN = "ddk_this-token-does-not-exist-0123456789"


def serve_and_ask(database_url: str, log_dir: Path, log_format: str) -> tuple[str, str, str]:
    """Start the service, send a few requests, stop it; its whole output, the token and the
    dashboard session's id."""
    service = Service(database_url, log_dir)
    service.env["DEVICEDECK_LOG_FORMAT"] = log_format
    token = service.create_token("log-reader", "read", "ingest")
    service.start()
    try:
        with httpx.Client(base_url=service.url, timeout=30) as client:
            good = {"Authorization": f"Bearer {token}"}
            posted = client.post(
                "/api/v1/ingest/listandwatch",
                json=listandwatch("node-a", [dev("gpu-0")], 1),
                headers=good,
            )
            assert posted.status_code == 200, posted.text
            [device] = client.get("/api/v1/devices", headers=good).json()["results"]
            assert client.get(f"/api/v1/devices/{device['id']}", headers=good).status_code == 200
            refused = client.get("/api/v1/nodes", headers={"Authorization": f"Bearer {BAD_TOKEN}"})
            assert refused.status_code == 401
            # Signed in to the dashboard: its session cookie is a secret as well.
            session_id = sign_in(client, token).cookies["devicedeck_session"]
            assert client.get("/").status_code == 200
    finally:
        service.stop()
    return (log_dir / "service-1.log").read_text(), token, session_id


def test_json_logs_are_one_object_a_line_with_an_access_line_per_request(
    database_url: str, tmp_path: Path
) -> None:
    output, token, session_id = serve_and_ask(database_url, tmp_path, "json")
    entries = []
    for line in output.splitlines():
        if line.strip():
            entry = json.loads(line)  # every line, the server's own included
            assert isinstance(entry, dict) and {"time", "level", "logger", "message"} <= set(entry)
            entries.append(entry)
    access = [e for e in entries if e["logger"] == "devicedeck.access"]

    def answered(method: str, route: str, status: int) -> dict[str, Any]:
        [found] = [
            e for e in access if (e["method"], e["route"], e["status"]) == (method, route, status)
        ]
        return found

    ingest = answered("POST", "/api/v1/ingest/listandwatch", 200)
    assert ingest["event"] == "request" and ingest["principal"] == "log-reader"
    assert isinstance(ingest["duration_ms"], int | float) and ingest["duration_ms"] >= 0
    assert answered("GET", "/api/v1/devices/{id}", 200)["principal"] == "log-reader"
    assert answered("GET", "/api/v1/nodes", 401)["principal"] is None
    assert answered("GET", "/", 200)["principal"] == "log-reader"
    assert token not in output and BAD_TOKEN not in output and session_id not in output


def test_text_logs_have_the_access_line_as_key_value_pairs(
    database_url: str, tmp_path: Path
) -> None:
    output, token, session_id = serve_and_ask(database_url, tmp_path, "text")
    access = [line for line in output.splitlines() if "logger=devicedeck.access" in line]
    assert any(
        "method=GET route=/api/v1/devices/{id} status=200 duration_ms=" in line
        and line.endswith("principal=log-reader")
        for line in access
    ), access
    assert any("route=/api/v1/nodes status=401" in line for line in access), access
    assert token not in output and BAD_TOKEN not in output and session_id not in output


LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}


def log_calls(path: Path) -> list[ast.Call]:
    """Calls of log.LEVEL(...), logger.LEVEL(...) and logging.getLogger(...).LEVEL(...)."""
    calls = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = ast.unparse(node.func.value)
            if node.func.attr in LEVELS and (target in ("log", "logger") or "getLogger" in target):
                calls.append(node)
    return calls


def test_every_log_call_of_the_service_agent_and_demo_names_its_event() -> None:
    """A collector queries lines by `event`; a line without one gets the first words of its
    message, which a reworded message would change. The simulators are left to that."""
    unnamed = []
    for path in sorted(APP.rglob("*.py")):
        if {"sim", "proto"} & set(path.relative_to(APP).parts):
            continue
        for call in log_calls(path):
            extra = next((k.value for k in call.keywords if k.arg == "extra"), None)
            keys = (
                [k.value for k in extra.keys if isinstance(k, ast.Constant)]
                if isinstance(extra, ast.Dict)
                else []
            )
            if "event" not in keys:
                unnamed.append(f"{path.relative_to(APP)}:{call.lineno}")
    assert unnamed == []
    assert len(log_calls(APP / "runtime" / "webhooks.py")) >= 5, "the scan finds the calls"


def record(message: str, *args: object, **fields: object) -> logging.LogRecord:
    made = logging.LogRecord("lib.thing", logging.INFO, __file__, 1, message, args, None)
    made.created = 1796308565.25  # 2026-12-03T14:36:05.250Z
    made.msecs = 250.0
    for key, value in fields.items():
        setattr(made, key, value)
    return made


def test_times_are_rfc3339_in_utc_with_milliseconds_in_both_formats() -> None:
    from devicedeck.logs import JsonFormatter, TextFormatter

    assert json.loads(JsonFormatter().format(record("x")))["time"] == "2026-12-03T14:36:05.250Z"
    assert TextFormatter().format(record("x")).startswith("time=2026-12-03T14:36:05.250Z ")


@pytest.mark.parametrize(
    ("message", "args", "event"),
    [
        # uvicorn, alembic, httpx: the words before the first value.
        ("Started server process [%d]", (42,), "started_server_process"),
        (
            "Uvicorn running on %s://%s:%d (Press CTRL+C to quit)",
            ("http", "h", 1),
            "uvicorn_running_on",
        ),
        ("Running upgrade %s -> %s, %s", ("a", "b", "c"), "running_upgrade"),
        ("Will assume transactional DDL.", (), "will_assume_transactional_ddl"),
        ('HTTP Request: %s %s "%s %d %s"', ("POST", "u", "HTTP/1.1", 200, "OK"), "http_request"),
        ("%s", ("anything",), "lib_thing"),
    ],
)
def test_a_line_without_an_event_gets_one_from_its_message_template(
    message: str, args: tuple[object, ...], event: str
) -> None:
    from devicedeck.logs import JsonFormatter, TextFormatter

    assert json.loads(JsonFormatter().format(record(message, *args)))["event"] == event
    assert f" event={event}" in TextFormatter().format(record(message, *args))


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_credentials_in_any_url_and_named_secrets_are_written_as_stars(log_format: str) -> None:
    from devicedeck.logs import JsonFormatter, Redactor, TextFormatter

    redact = Redactor(["key=abc123"])
    formatter = JsonFormatter(redact) if log_format == "json" else TextFormatter(redact)
    line = formatter.format(
        record(
            "POST %s failed",
            "https://bob:pa55@hooks.example/x?key=abc123",
            target=["postgresql://app:dbpa55@db/x"],
        )
    )
    for secret in ("bob", "pa55", "abc123"):
        assert secret not in line
    assert "https://***@hooks.example/x?***" in line and "postgresql://***@db/x" in line


def test_no_log_field_is_named_like_an_attribute_of_every_log_record() -> None:
    """logging refuses such an `extra` with a KeyError when the line is written: at run time,
    on whatever path logs it, often an error path."""
    reserved = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
    clashes = []
    for path in sorted(APP.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.keyword) and node.arg == "extra"):
                continue
            if isinstance(node.value, ast.Dict):
                keys = [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
                clashes += [f"{path.name}:{node.value.lineno} {k}" for k in keys if k in reserved]
    assert clashes == []


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_field_value_that_looks_like_a_token_is_only_what_the_call_gave(
    log_format: str,
) -> None:
    """Fields are written as given: the formatter adds nothing of the request."""
    from devicedeck.config import LogFormat
    from devicedeck.logs import JsonFormatter, TextFormatter

    formatter = JsonFormatter() if LogFormat(log_format) is LogFormat.JSON else TextFormatter()
    record = logging.LogRecord(
        "devicedeck.test", logging.WARNING, __file__, 1, "post failed", None, None
    )
    for key, value in {
        "event": "push_failed",
        "status": 503,
        "detail": 'a "quoted" = value',
    }.items():
        setattr(record, key, value)
    line = formatter.format(record)
    if log_format == "json":
        entry = json.loads(line)
        assert (entry["event"], entry["status"], entry["detail"]) == (
            "push_failed",
            503,
            'a "quoted" = value',
        )
        assert entry["message"] == "post failed"
    else:
        assert line.endswith(
            'post failed event=push_failed status=503 detail="a \\"quoted\\" = value"'
        )
