"""Log setup: key=value text for people, one JSON object a line for collectors.

Log calls pass their fields as `extra` (`log.warning("push failed", extra={"event":
"push_failed", "status": 503})`): the text format appends them as key=value, the JSON format
makes each a key of its own, so a collector can query them.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from devicedeck.config import LogFormat

# Attributes every LogRecord has; anything else on a record came in through `extra`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
# uvicorn's copy of its message with terminal colours.
_STANDARD.add("color_message")
# Keys the JSON object sets itself; a field of the same name is kept under field_<name>.
_OWN_KEYS = {"time", "level", "logger", "message", "exception"}


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _plain(value: Any) -> Any:
    """A field as JSON can hold it; anything else as its text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in fields_of(record).items():
            entry[f"field_{key}" if key in _OWN_KEYS else key] = _plain(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(_plain(value), ensure_ascii=False)
    if text == "" or any(c in text for c in ' "=\n\t\\'):
        return json.dumps(text, ensure_ascii=False)
    return text


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("time=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        pairs = " ".join(
            f"{key}={_text_value(value)}"
            for key, value in fields_of(record).items()
            if value is not None
        )
        if not pairs:
            return line
        head, newline, rest = line.partition("\n")  # a traceback stays below the line
        return f"{head} {pairs}{newline}{rest}"


def configure_logging_once(level: str) -> None:
    """Text logs for the simulators and the demo's helpers, unless their caller (a test, the
    demo) set up logging already."""
    if not logging.getLogger().handlers:
        configure_logging(LogFormat.TEXT, level)


def configure_logging(fmt: LogFormat, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt is LogFormat.JSON else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
