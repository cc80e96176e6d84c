"""``engram --help`` loads neither a client library nor the event models; a command loads
what it uses when it runs."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from streams.cli import deferred

SLOW_TO_IMPORT = (
    "aiokafka",
    "cryptography",
    "fastapi",
    "faust",
    "httpx",
    "mcp",
    "numpy",
    "qdrant_client",
    "qdrant_edge",
    "redis",
    "schemas",
    "uvicorn",
)


def test_the_command_line_loads_nothing_slow_until_a_command_runs() -> None:
    """In a fresh interpreter: the test process has imported them all already."""
    probe = (
        "import sys, streams.cli.main\n"
        f"print(sorted(m for m in {SLOW_TO_IMPORT!r} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert loaded.stdout.strip() == "[]", loaded.stderr


def test_a_command_s_error_handling_loads_nothing_until_a_failure_reaches_it() -> None:
    """Every command runs inside ``friendly_errors``: naming the error classes of every module
    on entry loaded FastAPI and the replay's modules, ~1 s of every command's start."""
    probe = (
        "import sys\n"
        "from streams.cli.console import friendly_errors\n"
        "with friendly_errors():\n"
        "    pass\n"
        f"print(sorted(m for m in {SLOW_TO_IMPORT!r} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert loaded.stdout.strip() == "[]", loaded.stderr


@pytest.mark.parametrize("name", deferred.__all__)
def test_each_deferred_name_is_the_module_it_stands_for(name: str) -> None:
    assert getattr(deferred, name) is importlib.import_module(deferred._MODULES[name])


def test_an_unknown_name_is_an_attribute_error() -> None:
    assert sorted(deferred.__all__) == sorted(deferred._MODULES)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = deferred.nothing


LOG_COMMANDS = (
    "streams.eventlog.publisher",
    "streams.eventlog.history",
    "streams.eventlog.archive",
    "streams.rebuild.replay",
    "streams.rebuild.reprocess",
    "streams.privacy.forgetting",
)
"""What ``engram publish``, ``history``, ``export``, ``replay``, ``reprocess`` and ``forget``
load when they run: their Kafka clients, and no Faust, which only a worker runs."""


def test_a_command_that_reads_or_writes_the_log_loads_no_faust() -> None:
    probe = f"import sys\nfor m in {LOG_COMMANDS!r}: __import__(m)\nprint('faust' in sys.modules)"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert loaded.stdout.strip() == "False", loaded.stderr
