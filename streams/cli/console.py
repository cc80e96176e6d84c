"""What the command line prints, and how a failure reaches a person: one readable line on
stderr and exit code 2, never a traceback."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, NoReturn

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console

from streams.cli import deferred
from streams.runtime.collector import tune_collector

console = Console()
err = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


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
    return "\n".join(
        f"  {'.'.join(str(p) for p in problem['loc']) or '(input)'}: {problem['msg']}"
        for problem in exc.errors(include_url=False)
    )


def known_errors() -> tuple[type[Exception], ...]:
    """The failures whose message alone tells a person what to do."""
    return (
        deferred.projection_switch.WrongConfigurationError,
        deferred.projection_versions.SwitchError,
        deferred.publisher.PublishError,
        deferred.query_client.QueryError,
        deferred.store_interfaces.ProjectionError,
        deferred.broker.BrokerStartError,
        deferred.redis_server.RedisServerError,
        deferred.archive.ArchiveError,
        deferred.keyring.KeyringError,
        deferred.service_auth.ApiKeysFileError,
    )


@contextlib.contextmanager
def friendly_errors() -> Iterator[None]:
    """Known failures become one readable line and exit code 2, never a traceback."""
    known = known_errors()
    try:
        yield
    except typer.Exit:
        raise
    except known as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail(f"invalid input:\n{validation_lines(exc)}")
    except (deferred.errors.EngramError, TimeoutError, OSError, ValueError, RuntimeError) as exc:
        fail(f"{type(exc).__name__}: {exc}")


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """A command's work, on an event loop of its own, its failures made readable, with the
    garbage collector tuned for a long-running process (:mod:`streams.runtime.collector`)."""
    tune_collector()
    with friendly_errors():
        asyncio.run(main())
