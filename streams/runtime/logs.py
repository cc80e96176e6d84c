"""Structured logs: one JSON object a line in clusters, readable lines on a terminal."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from datetime import UTC, datetime
from typing import Any

import orjson

_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class ConsoleFormatter(logging.Formatter):
    """One line a record. An exception is told by its type and message, not its traceback
    (which the JSON format keeps): without them a crash said only that something failed."""

    def format(self, record: logging.LogRecord) -> str:
        extra = {k: v for k, v in record.__dict__.items() if k not in _STANDARD}
        tail = " ".join(f"{k}={v}" for k, v in extra.items())
        line = f"{record.levelname.lower():7} {record.name}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            told = " ".join(str(exc).split())
            line = f"{line}: {type(exc).__name__}: {told}" if told else f"{line}: {exc!r}"
        return f"{line} {tail}" if tail else line


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted, not when it was made, so
    a process that swaps its stderr (a test runner invoking the CLI) never logs into a closed
    stream."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def log_thread_exception(args: threading.ExceptHookArgs) -> None:
    """A thread's uncaught exception as a log record, not a bare traceback on stderr: one line
    on a terminal, the traceback kept in a JSON line. Faust's consumer thread ends this way
    when its broker is gone while it stops (a CancelledError, a warning, not an error)."""
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    cancelled = issubclass(args.exc_type, asyncio.CancelledError)
    logging.getLogger("engram.threads").log(
        logging.WARNING if cancelled else logging.ERROR,
        "thread %s ended",
        name,
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),  # type: ignore[arg-type]
    )


def configure_logging(level: str = "info", fmt: str = "console") -> None:
    threading.excepthook = log_thread_exception
    handler = StderrHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else ConsoleFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Faust and aiokafka are chatty at INFO; their warnings still show.
    for noisy in ("faust", "mode", "aiokafka", "kafka", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
