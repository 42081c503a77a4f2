"""Logging setup for the command line and workers: key=value or JSON lines on stderr.

The library only logs through ``logging.getLogger(__name__)``; this module is used by the
entry points, never imported by the library itself.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

# Attributes every LogRecord has; anything else was passed with ``extra=`` and is printed.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "ts": f"{record.created:.3f}",
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    fields.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
    if record.exc_info:
        fields["exc"] = logging.Formatter().formatException(record.exc_info)
    return fields


class KeyValueFormatter(logging.Formatter):
    """``ts=1700000000.123 level=info logger=schedcache.expiry msg="expired 3 pods"``."""

    def format(self, record: logging.LogRecord) -> str:
        parts = []
        for key, value in _fields(record).items():
            text = str(value)
            if not text or any(c in text for c in ' "=\n'):
                text = json.dumps(text)
            parts.append(f"{key}={text}")
        return " ".join(parts)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), default=str)


FORMATTERS = {"kv": KeyValueFormatter, "json": JsonFormatter}


def configure(level: str = "INFO", fmt: str = "kv") -> None:
    """Route the ``schedcache`` loggers to stderr in the chosen format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(FORMATTERS[fmt]())
    root = logging.getLogger("schedcache")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
