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


@pytest.mark.parametrize("name", deferred.__all__)
def test_each_deferred_name_is_the_module_it_stands_for(name: str) -> None:
    assert getattr(deferred, name) is importlib.import_module(deferred._MODULES[name])


def test_an_unknown_name_is_an_attribute_error() -> None:
    assert sorted(deferred.__all__) == sorted(deferred._MODULES)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = deferred.nothing
