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


def _json(value: Any) -> str:
    """JSON with every non-ASCII and control character escaped (json.dumps leaves DEL)."""
    return json.dumps(value, default=str).replace("\x7f", "\\u007f")


class KeyValueFormatter(logging.Formatter):
    """``ts=1700000000.123 level=info logger=schedcache.ops.expiry msg="expired 3 pods"``.

    A value with a space, quote, ``=`` or any character that is not printable ASCII is
    written as a JSON string, so a log line is one line of plain text whatever a name holds
    (a NUL, an escape sequence, a lone surrogate)."""

    def format(self, record: logging.LogRecord) -> str:
        parts = []
        for key, value in _fields(record).items():
            text = str(value)
            if not text or not _plain(text):
                text = _json(text)
            parts.append(f"{key}={text}")
        return " ".join(parts)


def _plain(text: str) -> bool:
    return text.isascii() and text.isprintable() and not any(c in text for c in ' "=')


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return _json(_fields(record))


FORMATTERS = {"kv": KeyValueFormatter, "json": JsonFormatter}


def configure(level: str = "INFO", fmt: str = "kv") -> None:
    """Route the ``schedcache`` loggers to stderr in the chosen format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(FORMATTERS[fmt]())
    root = logging.getLogger("schedcache")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
