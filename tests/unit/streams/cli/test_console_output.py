"""What the command line prints is shown as it is: stored text and user input are not read as
Rich markup (``[/INST]``, common in a language model's text, was a crash: a closing tag with no
opening one; ``[bold]`` and ``:smile:`` changed what was shown), and an error is one line."""

from __future__ import annotations

import contextlib
import io
from datetime import UTC, datetime

import pytest
import typer
from rich.console import Console
from rich.table import Table

from projections.history import AgentHistory, LogPosition, TimelineEntry
from schemas.errors import EngramError
from streams.cli.console import console, err, fail, friendly_errors, print_whole
from streams.cli.eventlog import history_table

TEXTS = ["Year 1: the [/INST] tag", "closing [/] and [/bold]", "[bold]Year 1[/bold] :smile:"]


@pytest.mark.parametrize("text", TEXTS)
def test_printed_text_is_shown_verbatim(text: str) -> None:
    with console.capture() as captured:
        console.print(text)
    assert captured.get().rstrip("\n") == text


def test_a_history_shows_stored_text_verbatim() -> None:
    entries = tuple(
        TimelineEntry(
            at=datetime(2026, 1, 1, tzinfo=UTC),
            kind="recorded",
            memory_id=f"m{i}",
            text=text,
            event_id=f"e{i}",
            position=LogPosition(topic="memory.items", partition=0, offset=i),
        )
        for i, text in enumerate(TEXTS)
    )
    history = AgentHistory(
        agent_id="U3", entries=entries, counts={"recorded": 3}, total=3, truncated=False
    )
    with console.capture() as captured:
        console.print(history_table(history), width=200)
    for text in TEXTS:
        assert text in captured.get()


def test_a_history_names_each_retrieval_by_its_event_id() -> None:
    """`engram recall AGENT --again ID` takes it, and the table was the one place without it."""
    entry = TimelineEntry(
        at=datetime(2026, 1, 1, tzinfo=UTC),
        kind="retrieved",
        text="retrieved 2 memories",
        event_id="c0ffee00-0000-4000-8000-000000000001",
        position=LogPosition(topic="memory.access", partition=0, offset=3),
    )
    history = AgentHistory(
        agent_id="U3", entries=(entry,), counts={"retrieved": 1}, total=1, truncated=False
    )
    wide = Console(width=200, markup=False)
    with wide.capture() as captured:
        wide.print(history_table(history))
    assert "(id c0ffee00-0000-4000-8000-000000000001)" in captured.get()


def test_an_error_names_the_input_verbatim_on_one_line() -> None:
    message = "--after: '[/]:0:x' is not topic:partition:offset " + "x" * 150
    with err.capture() as captured, pytest.raises(typer.Exit) as exited:
        fail(message)
    assert exited.value.exit_code == 2
    assert captured.get() == f"error: {message}\n"


def test_an_error_of_engram_is_its_message_without_its_class() -> None:
    """`DataDirInUseError: ...` told a user the name of a class, not what to do."""

    class DataDirInUseError(EngramError):
        pass

    with err.capture() as captured, pytest.raises(typer.Exit), friendly_errors():
        raise DataDirInUseError("another `engram up` uses /tmp/x: stop it first")
    assert captured.get() == "error: another `engram up` uses /tmp/x: stop it first\n"


PRINTS_MUCH = """
import sys
import typer
from streams.cli.console import friendly_errors
try:
    with friendly_errors():
        for i in range(200_000):
            print("line", i)
except typer.Exit as exit:
    sys.exit(exit.exit_code)
"""


def test_a_reader_that_goes_away_ends_the_output_quietly() -> None:
    """`engram dead-letters --json | head` printed `error: BrokenPipeError`."""
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-c", PRINTS_MUCH], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert child.stdout is not None
    child.stdout.readline()
    child.stdout.close()
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 141  # 128 + SIGPIPE, as a process the signal ended
    assert stderr == b""


PRINTS_MUCH_IN_A_COMMAND = """
import sys
import typer
from streams.cli.console import console, run
async def main() -> None:
    for i in range(200_000):
        console.print("line", i)
try:
    run(main)
except typer.Exit as exit:
    sys.exit(exit.exit_code)
"""


def test_a_reader_that_goes_away_ends_a_command_s_rich_output_quietly() -> None:
    """`engram publish H1 x | true`: rich's own handler ended the command with a traceback and
    exit 1 ("not done") inside its event loop, though the event was published, so a script
    that retried published it twice."""
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-c", PRINTS_MUCH_IN_A_COMMAND],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None
    child.stdout.readline()
    child.stdout.close()
    _, stderr = child.communicate(timeout=60)
    assert (child.returncode, stderr) == (141, b"")


def test_a_table_printed_to_no_terminal_keeps_each_row_on_one_line() -> None:
    """``engram versions`` piped: rich assumed 80 columns and folded the names a user copies."""
    table = Table("version", "redis namespace", "qdrant collection")
    row = ("v1 *", "engram.v1.a-rather-long-namespace", "episodic_memories_v1_a_long_collection")
    table.add_row(*row)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_whole(table)
    assert any(all(cell in line for cell in row) for line in out.getvalue().splitlines())
