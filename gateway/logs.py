"""Structured logging: every line can carry listener, client address, client id, correlation id.

Callers pass fields with ``extra={"kgw": {...}}``; the formatters render them
as ``key=value`` pairs (text) or as JSON object members (json).
"""

from __future__ import annotations

import json
import logging
import sys
import time

__all__ = ["configure_logging", "fields"]


def fields(**kv) -> dict:
    """``logger.info(msg, extra=fields(listener=..., client=...))``"""
    return {"kgw": kv}


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = f"{self.formatTime(record)} {record.levelname} {record.name}: {record.getMessage()}"
        extra = getattr(record, "kgw", None)
        if extra:
            base += " " + " ".join(f"{k}={v}" for k, v in extra.items() if v is not None)
        if record.exc_info:
            base += "\n" + self.formatException(record.exc_info)
        return base


def rfc3339(created: float) -> str:
    """``2026-11-25T23:01:48.123Z``: RFC 3339 in UTC with milliseconds (what log pipelines parse)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created * 1000) % 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": round(record.created, 3),
            "time": rfc3339(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: v for k, v in (getattr(record, "kgw", None) or {}).items() if v is not None})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class _WorkerField(logging.Filter):
    """``worker=I`` on every line of a worker process (``kgw run --workers N``)."""

    def __init__(self, worker: int) -> None:
        super().__init__()
        self.worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        record.kgw = {**(getattr(record, "kgw", None) or {}), "worker": self.worker}
        return True


def configure_logging(level: str = "INFO", fmt: str = "text", audit_level: str = "INFO",
                      worker: int | None = None) -> None:
    """Log to stderr; the audit logger ``kgw.authorizer`` gets its own level
    (``OFF`` silences it), as Kafka's ``kafka.authorizer.logger`` does."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    if worker is not None:
        handler.addFilter(_WorkerField(worker))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    set_audit_level(audit_level)


def set_audit_level(level: str) -> None:
    audit = logging.getLogger("kgw.authorizer")
    audit.setLevel(logging.CRITICAL + 1 if level.upper() == "OFF" else level.upper())
