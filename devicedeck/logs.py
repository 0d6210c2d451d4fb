"""Log setup: key=value text for people, one JSON object a line for collectors.

Log calls pass their fields as `extra` (`log.warning("push failed", extra={"event":
"push_failed", "status": 503})`): the text format appends them as key=value, the JSON format
makes each a key of its own, so a collector can query them. Every line has a time in RFC 3339
(UTC, milliseconds, `Z`) and an `event`: the one the call gave, or, for a line of a library
(uvicorn, alembic, httpx) or a call that gave none, one made of its message's first words
before any value (`Started server process [%d]` -> `started_server_process`), the same for
every line of that kind.

Secrets never reach the output: the credentials in any URL (`scheme://user:password@`) and
the values a program names as secret (the query of a webhook URL, a database password) are
replaced by `***` in every message, field and traceback, whoever logged them; and the HTTP
client libraries, which log each request's full URL, are held at WARNING.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from devicedeck.config import LogFormat

# Attributes every LogRecord has; anything else on a record came in through `extra`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
# uvicorn's copy of its message with terminal colours.
_STANDARD.add("color_message")
# Keys the JSON object sets itself; a field of the same name is kept under field_<name>.
_OWN_KEYS = {"time", "level", "logger", "message", "exception", "stack"}
REDACTED = "***"
# scheme://userinfo@ : whatever stands before the @ is a credential.
_USERINFO = re.compile(r"\b(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@?#]+@")
# A message's words up to its first value: a placeholder, a colon, a bracket, a full stop.
_MESSAGE_HEAD = re.compile(r"%|\{|[:;,.(\[]|\s->?\s|\s-\s")
_WORD = re.compile(r"[A-Za-z0-9]+")
EVENT_WORDS = 6
# Libraries that log every request with its full URL (credentials and query included) at INFO
# or DEBUG; the Kubernetes client logs response bodies at DEBUG, TokenReviews among them.
QUIET_LOGGERS = ("httpx", "httpcore", "urllib3", "kubernetes", "hpack")


class Redactor:
    """Replaces the given secret strings, and the credentials of any URL, with ***."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # One pass over each string: the secrets, longest first (a URL goes whole before a
        # part of it is looked for), then a URL's user information.
        known = sorted({s for s in secrets if s}, key=len, reverse=True)
        alternatives = [f"(?:{re.escape(secret)})" for secret in known]
        self._pattern = re.compile("|".join([*alternatives, _USERINFO.pattern]))

    def _replace(self, match: re.Match[str]) -> str:
        scheme = match.group("scheme")
        return f"{scheme}{REDACTED}@" if scheme else REDACTED

    def __call__(self, text: str) -> str:
        return self._pattern.sub(self._replace, text)


def rfc3339(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{int(record.msecs):03d}Z"


def event_of(record: logging.LogRecord) -> str:
    """The event the call named, else the first words of its message template."""
    given = getattr(record, "event", None)
    if given:
        return str(given)
    template = record.msg if isinstance(record.msg, str) else type(record.msg).__name__
    words = _WORD.findall(_MESSAGE_HEAD.split(template, maxsplit=1)[0])[:EVENT_WORDS]
    return "_".join(word.lower() for word in words) or record.name.replace(".", "_")


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """The record's fields, `event` first and always there."""
    fields = {"event": event_of(record)}
    for key, value in vars(record).items():
        if key not in _STANDARD and key != "event" and not key.startswith("_"):
            fields[key] = value
    return fields


def _plain(value: Any, redact: Redactor) -> Any:
    """A field as JSON can hold it, anything else as its text; secrets taken out of text."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list | tuple):
        return [_plain(item, redact) for item in value]
    if isinstance(value, dict):
        return {redact(str(k)): _plain(v, redact) for k, v in value.items()}
    return redact(str(value))


class JsonFormatter(logging.Formatter):
    def __init__(self, redact: Redactor | None = None) -> None:
        super().__init__()
        self.redact = redact or Redactor()

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": rfc3339(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": self.redact(record.getMessage()),
        }
        for key, value in fields_of(record).items():
            entry[f"field_{key}" if key in _OWN_KEYS else key] = _plain(value, self.redact)
        if record.exc_info:
            entry["exception"] = self.redact(self.formatException(record.exc_info))
        if record.stack_info:
            entry["stack"] = self.redact(self.formatStack(record.stack_info))
        return json.dumps(entry, ensure_ascii=False)


def _text_value(value: Any, redact: Redactor) -> str:
    plain = _plain(value, redact)
    text = plain if isinstance(plain, str) else json.dumps(plain, ensure_ascii=False)
    if text == "" or any(c in text for c in ' "=\n\t\\'):
        return json.dumps(text, ensure_ascii=False)
    return text


class TextFormatter(logging.Formatter):
    def __init__(self, redact: Redactor | None = None) -> None:
        super().__init__()
        self.redact = redact or Redactor()

    def format(self, record: logging.LogRecord) -> str:
        pairs = " ".join(
            f"{key}={_text_value(value, self.redact)}"
            for key, value in fields_of(record).items()
            if value is not None
        )
        line = (
            f"time={rfc3339(record)} level={record.levelname} logger={record.name} "
            f"{self.redact(record.getMessage())} {pairs}"
        )
        # A traceback stays below the line.
        if record.exc_info:
            line += "\n" + self.redact(self.formatException(record.exc_info))
        if record.stack_info:
            line += "\n" + self.redact(self.formatStack(record.stack_info))
        return line


def formatted_line(fmt: LogFormat, logger: str, message: str, **fields: Any) -> str:
    """One INFO line as configure_logging would write it, for a program that writes into a
    log file it does not own (the demo, into its children's logs)."""
    record = logging.LogRecord(logger, logging.INFO, "", 0, message, None, None)
    record.__dict__.update(fields)
    formatter = JsonFormatter() if fmt is LogFormat.JSON else TextFormatter()
    return formatter.format(record)


def configure_logging_once(level: str) -> None:
    """Logs for the simulators and the demo's helpers, in the format DEVICEDECK_LOG_FORMAT
    names (text unless it says json), unless their caller (a test) set up logging already."""
    if not logging.getLogger().handlers:
        wanted = os.environ.get("DEVICEDECK_LOG_FORMAT", "").strip().lower()
        configure_logging(LogFormat.JSON if wanted == "json" else LogFormat.TEXT, level)


def configure_logging(fmt: LogFormat, level: str = "INFO", secrets: Iterable[str] = ()) -> None:
    """Everything to standard error, in one format, with `secrets` never written."""
    redact = Redactor(secrets)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(redact) if fmt is LogFormat.JSON else TextFormatter(redact))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
