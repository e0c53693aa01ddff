"""Log lines of ``memmachine serve``, ``worker`` and ``mcp``: JSON for machines, text for a
terminal, never a secret or personal data.

``MEMMACHINE_LOG_FORMAT``: ``json`` writes one JSON object per line (``time``, ``level``,
``logger``, ``message``, ``request_id`` when one is bound, the fields a line adds such as
``method``/``route``/``status``/``duration_ms`` of a request, and ``exception`` with the
traceback); ``text`` writes ``time level logger [request id]: message``; ``auto`` (the
default) picks text when stderr is a terminal and JSON otherwise (a container, a file, a
pipe to a log shipper).

Every line passes :class:`ScrubFilter` first: the configuration's passwords and keys
(:meth:`memmachine.config.Settings.secrets`) become ``***`` and what the write path's PII
redactor finds (emails, phone and card numbers...) becomes its ``[EMAIL]``-style token, in
the message, its arguments and a traceback alike.

The request id is the one :mod:`memmachine.telemetry` binds for a request and for the jobs a
request enqueued, so grepping one id finds the request's line and its jobs' lines.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from memmachine.config import Settings
from memmachine.safety.pii import PII_KINDS, Redactor
from memmachine.telemetry import current_request_id

__all__ = ["JsonFormatter", "ScrubFilter", "TextFormatter", "configure_logging", "wants_json"]

#: Attributes every LogRecord has; anything else on a record is a field a line added.
_STANDARD = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__.keys()
    | {"message", "asctime", "request_id", "taskName"}
)


def wants_json(log_format: str, stream: TextIO) -> bool:
    """``json`` / ``text`` as set; ``auto``: JSON unless ``stream`` is a terminal."""
    if log_format == "auto":
        isatty = getattr(stream, "isatty", None)
        return not (callable(isatty) and isatty())
    return log_format == "json"


class ScrubFilter(logging.Filter):
    """Replaces known secrets by ``***`` and personal data by redaction tokens in a record's
    rendered message (arguments included) and traceback; adds ``request_id``."""

    def __init__(self, secrets: Sequence[str], redactor: Redactor | None = None) -> None:
        super().__init__()
        # Longest first, so a secret containing another is replaced whole.
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._redactor = redactor or Redactor(PII_KINDS)

    def scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return self._redactor.redact(text).text

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self.scrub(record.getMessage())
        record.args = None
        if record.exc_info:
            record.exc_text = self.scrub(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        for key, value in list(record.__dict__.items()):
            if key not in _STANDARD and isinstance(value, str):
                setattr(record, key, self.scrub(value))
        if getattr(record, "request_id", None) is None:
            record.request_id = current_request_id()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            line["request_id"] = request_id
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in line:
                line[key] = value
        if record.exc_text:
            line["exception"] = record.exc_text
        elif record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger [request id]: message`` for a person at a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s%(rid)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None)
        record.rid = f" [{request_id}]" if request_id else ""
        return super().format(record)


def configure_logging(settings: Settings, stream: TextIO | None = None) -> None:
    """Send every log record (uvicorn's included) to ``stream`` (stderr) at
    ``MEMMACHINE_LOG_LEVEL``, scrubbed, as JSON or text (``MEMMACHINE_LOG_FORMAT``).
    Replaces the root logger's handlers, so calling it again reconfigures."""
    stream = stream or sys.stderr
    handler = logging.StreamHandler(stream)
    handler.addFilter(ScrubFilter(settings.secrets()))
    handler.setFormatter(
        JsonFormatter() if wants_json(settings.log_format, stream) else TextFormatter()
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.log_level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
