"""Every line a process prints goes through the log's format: a thread's crash too."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator

import orjson
import pytest

from streams.runtime.logs import configure_logging


@pytest.fixture(autouse=True)
def restored() -> Iterator[None]:
    hook, root = threading.excepthook, logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    threading.excepthook = hook
    root.handlers[:] = handlers
    root.setLevel(level)


def crash_a_thread(exc: BaseException) -> None:
    def run() -> None:
        raise exc

    thread = threading.Thread(target=run, name="doomed")
    thread.start()
    thread.join(5)


def test_a_thread_crash_is_one_console_line(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "console")
    crash_a_thread(ValueError("bad input"))
    err = capsys.readouterr().err
    assert err == "error   engram.threads: thread doomed ended: ValueError: bad input\n"


def test_a_thread_crash_keeps_its_traceback_in_a_json_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("info", "json")
    crash_a_thread(ValueError("bad input"))
    (line,) = capsys.readouterr().err.splitlines()
    entry = orjson.loads(line)
    assert (entry["level"], entry["logger"]) == ("error", "engram.threads")
    assert "Traceback" in entry["exc"]
    assert "ValueError: bad input" in entry["exc"]


def test_a_thread_cancelled_while_stopping_is_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("info", "console")
    crash_a_thread(asyncio.CancelledError())
    told = capsys.readouterr().err
    assert told == "warning engram.threads: thread doomed ended: CancelledError()\n"


def test_a_logged_exception_is_told_on_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A crash of the processors said only "a batch could not be processed" on a terminal;
    the reason (a 384-d embedding in a store of 256-d vectors) was in no line."""
    configure_logging("info", "console")
    try:
        raise ValueError("the embedding has shape (384,),\n but this store holds 256-d vectors")
    except ValueError:
        logging.getLogger("engram.processors").critical("a batch failed", exc_info=True)
    assert capsys.readouterr().err == (
        "critical engram.processors: a batch failed: ValueError: the embedding has shape "
        "(384,), but this store holds 256-d vectors\n"
    )
