"""A failing test's traceback given a line number in every entry before pytest reports it.

CPython 3.11 can leave an entry without one (``tb_lineno`` None) when an exception is raised
at an instruction that has none, as pytest-timeout's alarm signal can do in the middle of a
line. pytest's report then fails on that entry (``tb_lineno - 1``): the worker dies with an
INTERNALERROR and the test that failed is never named. Such an entry is given its function's
first line instead, and the failure is reported as any other.
"""

from __future__ import annotations

import types
from collections.abc import Generator

import pytest


def _numbered(tb: types.TracebackType | None) -> types.TracebackType | None:
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    if all(entry.tb_lineno is not None for entry in entries):
        return entries[0] if entries else None
    rebuilt = None
    for entry in reversed(entries):
        line = entry.tb_lineno
        if line is None:
            line = entry.tb_frame.f_code.co_firstlineno
        rebuilt = types.TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, line)
    return rebuilt


def number_every_line(exc: BaseException) -> bool:
    """Give every traceback of ``exc`` and of the exceptions chained to it a line number in
    each entry; whether any lacked one."""
    changed, seen = False, set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        numbered = _numbered(current.__traceback__)
        if numbered is not current.__traceback__:
            current.with_traceback(numbered)
            changed = True
        pending += [current.__cause__, current.__context__]
    return changed


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, None, None]:
    if call.excinfo is not None and number_every_line(call.excinfo.value):
        call.excinfo = pytest.ExceptionInfo.from_exception(call.excinfo.value)
    yield
