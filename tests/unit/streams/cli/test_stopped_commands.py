"""A one-shot command stopped by a signal (``streams.cli.console.run``): its cleanup runs, it
says what it left half done, and it exits with 128 + the signal's number. The signals are
real, sent to this process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys

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


def test_a_command_that_fails_says_what_it_left_before_its_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def main() -> None:
        with if_stopped(lambda: "version v9 is partly built: --resume finishes it"):
            raise ConnectionRefusedError(111, "Connect call failed")

    with pytest.raises(typer.Exit) as failed:
        run(main)
    assert failed.value.exit_code == 75
    said = capsys.readouterr().err.splitlines()
    assert said[0] == "version v9 is partly built: --resume finishes it"
    assert "Connect call failed" in said[1]


def test_a_refusal_the_command_says_itself_says_nothing_more(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``fail()`` raises typer.Exit, a RuntimeError: it was taken for a failure and followed
    by what the command left, contradicting the refusal."""
    from streams.cli.console import fail

    async def main() -> None:
        with if_stopped(lambda: "never said"):
            fail("refused: not forgotten", code=1)

    with pytest.raises(typer.Exit) as refused:
        run(main)
    assert refused.value.exit_code == 1
    assert capsys.readouterr().err.strip() == "error: refused: not forgotten"


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


def test_a_second_signal_ends_the_command_at_once_while_its_loop_is_busy() -> None:
    """Both signals reached the command through its event loop, so while a step held the loop
    (a store's write of a large batch) the second waited for it like the first."""
    script = (
        "import os, signal, sys, time\n"
        "from streams.cli.console import run\n"
        "async def main():\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(0.3)  # holds the loop\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(30)\n"
        "    print('went on', flush=True)\n"
        "run(main)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 128 + signal.SIGINT, done.stderr
    assert "Ctrl-C again: stopping at once" in done.stderr
    assert "went on" not in done.stdout


def test_work_cancelled_by_no_signal_fails_rather_than_passing_for_done(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0)

    with pytest.raises(typer.Exit) as failed:
        run(main)
    assert failed.value.exit_code == 1
    assert "cancelled, not by a signal" in capsys.readouterr().err


def test_one_signal_delivered_twice_is_one_stop(capsys: pytest.CaptureFixture[str]) -> None:
    """`timeout` sends its signal to the command and then to its process group, the command
    included: that stopped every command at once, without its cleanup."""
    cleaned: list[str] = []

    async def main() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(30)
        finally:
            cleaned.append("cleaned")

    with pytest.raises(typer.Exit) as stopped:
        run(main)
    assert stopped.value.exit_code == 128 + signal.SIGTERM
    assert cleaned == ["cleaned"]
    assert "SIGTERM: stopped" in capsys.readouterr().err
