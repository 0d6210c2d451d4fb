"""Log setup: key=value text for people, one JSON object a line for collectors."""

from __future__ import annotations

import json
import logging
import sys

from app.config import LogFormat


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(fmt: LogFormat, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt is LogFormat.JSON:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("time=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
