"""What a test that is about to time out is waiting for.

pytest-timeout prints the stack of every thread when a test passes its timeout, but a test stuck
in asyncio shows only its event loop waiting in ``select``: the coroutine that never finishes is
not on any thread's stack. A few seconds before the timeout, this prints
:func:`streams.runtime.stall_report.stall_report` (every thread's stack, then every unfinished
task of every open event loop down its awaits: the test's, and a Faust consumer thread's if one
is still alive) to the test's captured stderr, which a failed test's report shows.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator

import pytest

from streams.runtime.stall_report import reported_if_slow

__all__ = ["pytest_runtest_protocol"]

_AHEAD = 8.0
"""Seconds before the timeout at which the report is printed."""


def _timeout_of(item: pytest.Item) -> float | None:
    """The timeout pytest-timeout gives ``item``: its marker, else ``--timeout``, else
    ``PYTEST_TIMEOUT``, else the ini setting."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and (marker.args or "timeout" in marker.kwargs):
        return float(marker.args[0] if marker.args else marker.kwargs["timeout"])
    for value in (
        item.config.getoption("timeout", None),
        os.environ.get("PYTEST_TIMEOUT"),
        item.config.getini("timeout"),
    ):
        if value not in (None, ""):
            return float(value)
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    """Timed as pytest-timeout times a test: setup, call and teardown together (a node
    stopped by a module's fixture hangs in a teardown)."""
    timeout = _timeout_of(item)
    if timeout is None or timeout <= 2 * _AHEAD:
        yield
        return

    def write(report: str) -> None:
        sys.stderr.write(
            f"\n--- {item.nodeid} is still running {timeout - _AHEAD:.0f} s in; its threads "
            f"and unfinished asyncio tasks:\n{report}---\n"
        )
        sys.stderr.flush()

    with reported_if_slow(timeout - _AHEAD, write):
        yield
