"""What the command line prints, and how a failure reaches a person: one readable line on
stderr and exit code 2, never a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from types import FrameType
from typing import Any, NoReturn

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from streams.cli import deferred
from streams.cli.signals import STOPPING_SIGNALS, StopSignal, is_echo, unless_set
from streams.runtime.collector import tune_collector


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """Rich's own raises ``SystemExit(1)`` where it printed: inside a command's event loop,
        a traceback and exit 1 ("not done") for `engram publish H1 x | true`, whose event was
        published, so a script that retried published it twice. A ``BrokenPipeError`` reaches
        :func:`friendly_errors`, which ends the command quietly with 141, as a shell expects."""
        self.quiet = True
        raise BrokenPipeError


console = _Console(markup=False, emoji=False)
"""No markup by default: what is printed is mostly stored text and user input, where ``[/INST]``
was a crash (a closing tag without an opening one) and ``[bold]`` or ``:smile:`` changed what
was shown. A styled line says ``markup=True`` and escapes what it interpolates."""
err = _Console(stderr=True, markup=False, emoji=False, soft_wrap=True)
"""``soft_wrap``: an error is one line however long, not cut at 80 columns where stderr is no
terminal (a log collector, a Job's output)."""


WIDEST_TABLE = 1_000
"""Columns a table printed to no terminal may take (a measure needs a bound)."""


def print_whole(table: Table) -> None:
    """A table printed as wide as its rows where the output is no terminal: rich then assumes
    80 columns and folds cells, such as the names a user copies into the next command."""
    if console.is_terminal:
        console.print(table)
        return
    unbounded = console.options.update_width(WIDEST_TABLE)
    wide = console.measure(table, options=unbounded).maximum
    # Console.print caps a width at the console's own: another console, as wide as the rows.
    _Console(file=console.file, width=wide, markup=False, emoji=False).print(table)


def fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(message)}", markup=True)
    raise typer.Exit(code)


def invalid_retrieval(exc: ValidationError) -> NoReturn:
    """A retrieval's options refused: its first problem, the field named, in words."""
    from schemas.readable_errors import readable_reason  # schemas loads when a command runs

    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "request"
    fail(f"invalid retrieval: {where}: {readable_reason(first)}")


def checked_agent_id(agent_id: str) -> str:
    """``agent_id`` if the events accept it, else a clear error naming the rule (before any
    server is asked: a command that reads the log would otherwise read for nothing)."""
    try:
        TypeAdapter(deferred.envelope.AgentId).validate_python(agent_id)
    except ValidationError:
        fail(f"{agent_id!r} is not an agent id: it must be {deferred.envelope.AGENT_ID_RULE}")
    return agent_id


def validation_lines(exc: ValidationError) -> str:
    """One line per problem, naming the field: what a person needs, without pydantic's URLs."""
    from schemas.readable_errors import readable_reason  # schemas loads when a command runs

    return "\n".join(
        f"  {'.'.join(str(p) for p in problem['loc']) or '(input)'}: {readable_reason(problem)}"
        for problem in exc.errors(include_url=False)
    )


UNREACHABLE = 75
"""The exit code of a failure to reach the broker or Redis (sysexits' ``EX_TEMPFAIL``): the same
command may well succeed later, so a retry is worth it (the Kubernetes Jobs retry it). Exit code
2 stays a refusal, which would be refused again (the Jobs fail at once on it): before, an
unreachable broker was a 2 too, and a rolling restart of Kafka failed a replay Job for good."""


def _failure_kinds() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(What a retry may change, what it would meet again) among the causes of a failure;
    besides these, a Kafka error that says it is retriable (a leader election, a timeout)."""
    import ssl

    import httpx
    from aiokafka.errors import KafkaTimeoutError
    from redis.exceptions import AuthenticationError, AuthorizationError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    passing = (
        ConnectionError,  # refused, reset, aborted
        TimeoutError,  # a wait on a broker or a store that did not answer in time
        socket.gaierror,  # a host name that does not resolve (yet)
        KafkaTimeoutError,  # aiokafka's own, after retrying a leader election
        RedisConnectionError,
        RedisTimeoutError,
        httpx.TransportError,  # a Qdrant server out of reach
    )
    # A wrong password or certificate is a refusal, whatever wraps it (redis-py's
    # AuthenticationError is one of its ConnectionErrors).
    lasting = (AuthenticationError, AuthorizationError, ssl.SSLError)
    return passing, lasting


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` comes of a server that could not be reached, or not in time: it, or
    what it was raised from (the stores wrap the clients' errors); never a refused password
    or certificate, which another attempt would meet again."""
    from aiokafka.errors import KafkaError

    passing, lasting = _failure_kinds()
    seen: set[int] = set()
    found = False
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, lasting):
            return False
        if isinstance(current, passing) or (isinstance(current, KafkaError) and current.retriable):
            found = True
        seen.add(id(current))
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return found


@contextlib.contextmanager
def friendly_errors() -> Iterator[None]:
    """Known failures become one readable line and exit code 2 (a refusal), or
    :data:`UNREACHABLE` where a server could not be reached, never a traceback.

    Every failure of Engram's own is an :class:`~schemas.errors.EngramError` whose message says
    what to do, whatever module raised it. The clause names it through :mod:`deferred`, which
    loads the module only when a failure reaches it: naming each module's error class up front
    loaded them all (the query client with FastAPI, the replay's modules), ~1 s of every
    command's start."""
    try:
        yield
    except typer.Exit:
        raise
    except BrokenPipeError:
        # The reader went away (`engram dead-letters --json | head`): the rest has nowhere to
        # go, and the interpreter's last flush must not fail on it too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise typer.Exit(128 + signal.SIGPIPE) from None
    except ValidationError as exc:
        fail(f"invalid input:\n{validation_lines(exc)}")
    except deferred.errors.EngramError as exc:  # ours: the message says it all
        fail(str(exc), _code(exc))
    except (TimeoutError, OSError, ValueError, RuntimeError) as exc:
        fail(f"{type(exc).__name__}: {exc}", _code(exc))


def _code(exc: BaseException) -> int:
    return UNREACHABLE if unreachable(exc) else 2


LEFT_WHEN_STOPPED: list[str] = []
"""What a stopped command leaves behind, said by :func:`if_stopped` as the stop passed."""


@contextlib.contextmanager
def if_stopped(left: Callable[[], str | None]) -> Iterator[None]:
    """A command stopped (Ctrl-C, SIGTERM) inside this block says ``left()`` on its way out:
    what the stop left half done (a version partly built, an archive partly imported) and the
    command that finishes or removes it. Said by :func:`run`; None says nothing. A command
    that failed there says it too, before its error: a replay that lost its broker left a
    version building without a word, and each retry (exit 75 invites one) left another."""
    try:
        yield
    except (asyncio.CancelledError, KeyboardInterrupt):
        message = left()
        if message:
            LEFT_WHEN_STOPPED.append(message)
        raise
    except typer.Exit:  # a refusal the command said itself, not a failure
        raise
    except Exception:
        message = left()
        if message:
            err.print(message)
        raise


_SIGNALS: list[list[signal.Signals]] = []
"""The signals the command :func:`run` runs has received, while it runs."""


def unless_stopping() -> None:
    """A checkpoint of a long job's own work (its progress callbacks call it): a job still at
    work after a stop was asked is cancelled here. A cancel can be lost: on Python 3.11,
    ``asyncio.wait_for``, which redis-py wraps around every command it sends, swallows one
    that comes just as the command's write completes, and a replay then went on to switch."""
    if _SIGNALS and _SIGNALS[-1]:
        raise asyncio.CancelledError


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """A command's work, on an event loop of its own, its failures made readable, with the
    garbage collector tuned for a long-running process (:mod:`streams.runtime.collector`).

    The first Ctrl-C, SIGTERM or SIGHUP cancels the work (its ``finally`` blocks run: a fence
    is lowered, a staging directory removed), then the command says what it left
    (:func:`if_stopped`) and exits with 128 + the signal's number, as a shell expects; a second
    one ends it at once, even while the loop is busy (the handlers are the interpreter's, not
    the loop's). SIGTERM's default would end it on the spot, none of that done. Commands that
    wait for a signal themselves (:func:`streams.cli.signals.stop_on_signal`) put their own
    handlers in place of these while their loop runs."""
    tune_collector()
    stop = StopSignal()
    received: list[signal.Signals] = []
    loops: list[asyncio.AbstractEventLoop] = []

    def deliver(sig: signal.Signals) -> None:
        if stop.signal is None:
            stop.received(sig)

    first_at: list[float] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        sig, now = signal.Signals(signum), time.monotonic()
        if received:
            if not is_echo(sig, received[0], now - first_at[0]):
                stop.stop_at_once(sig)
            return
        received.append(sig)
        first_at.append(now)
        if loops:
            loops[0].call_soon_threadsafe(deliver, sig)

    async def until_done_or_stopped() -> bool:
        loops.append(asyncio.get_running_loop())
        if received:  # came before the loop ran
            deliver(received[0])
        return await unless_set(stop, main())

    LEFT_WHEN_STOPPED.clear()
    previous = _take_signals(on_signal)
    _SIGNALS.append(received)
    try:
        with friendly_errors():
            done = asyncio.run(until_done_or_stopped())
    finally:
        _SIGNALS.remove(received)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if done:
        return
    if not received:
        fail("the command's work was cancelled, not by a signal: it did not finish", code=1)
    by = received[0]
    name = "Ctrl-C" if by == signal.SIGINT else by.name
    err.print(f"{name}: stopped" + "".join(f"\n{left}" for left in LEFT_WHEN_STOPPED))
    raise typer.Exit(128 + by)


def _take_signals(
    handler: Callable[[int, FrameType | None], None],
) -> dict[signal.Signals, Any]:
    """``handler`` for each of :data:`STOPPING_SIGNALS`, from the main thread only (a command
    run by a test's runner in another thread takes none); returns the handlers it replaced. A
    SIGHUP that is ignored (`nohup`) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for sig in STOPPING_SIGNALS:
        if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
            continue
        previous[sig] = signal.signal(sig, handler)
    return previous
