"""A one-shot command stopped by a signal (``streams.cli.console.run``): its cleanup runs, it
says what it left half done, and it exits with 128 + the signal's number. The signals are
real, sent to this process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

import pytest
import typer

from streams.cli.console import if_stopped, run
from streams.cli.progress import counted


@pytest.mark.parametrize(("sig", "name"), [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
def test_a_stopped_command_cleans_up_says_what_it_left_and_exits_128_plus_the_signal(
    sig: signal.Signals, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cleaned: list[str] = []

    async def main() -> None:
        with if_stopped(lambda: "version v9 is partly built"):
            try:
                os.kill(os.getpid(), sig)
                await asyncio.sleep(30)
            finally:
                await asyncio.sleep(0)  # a cleanup that awaits, as lowering a fence does
                cleaned.append("cleaned")

    with pytest.raises(typer.Exit) as stopped:
        run(main)
    assert stopped.value.exit_code == 128 + sig
    assert cleaned == ["cleaned"]
    assert capsys.readouterr().err.split() == f"{name}: stopped version v9 is partly built".split()
    # The command's handlers are gone with its loop: the process takes signals as before.
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_a_command_that_finishes_says_nothing_of_a_stop(capsys: pytest.CaptureFixture[str]) -> None:
    async def main() -> None:
        with if_stopped(lambda: "never said"):
            await asyncio.sleep(0)

    run(main)
    assert capsys.readouterr().err == ""


def test_a_lost_cancel_still_stops_the_job_at_its_next_progress(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Python 3.11's ``asyncio.wait_for`` (around every redis-py command) can swallow a cancel
    that comes as its inner call completes; a replay stopped so went on and switched."""
    progressed: list[int] = []

    async def main() -> None:
        with counted("replaying", 3) as advance:
            os.kill(os.getpid(), signal.SIGINT)
            with contextlib.suppress(asyncio.CancelledError):  # swallowed, as wait_for does
                await asyncio.sleep(30)
            for _ in range(3):
                advance(1)
                progressed.append(1)

    with pytest.raises(typer.Exit) as stopped:
        run(main)
    assert stopped.value.exit_code == 128 + signal.SIGINT
    assert progressed == []
    assert "Ctrl-C: stopped" in capsys.readouterr().err
