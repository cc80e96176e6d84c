"""A command that could not reach the broker or Redis exits 75 (try again), one refused exits 2
(the Kubernetes Jobs fail at once on 2 and retry the rest): an unreachable broker was a 2 too,
so a rolling restart of Kafka failed a replay Job for good."""

from __future__ import annotations

import httpx
import pytest
import typer
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    LeaderNotAvailableError,
    TopicAuthorizationFailedError,
)
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from typer.testing import CliRunner

from projections.interfaces import ProjectionError
from streams.cli.console import UNREACHABLE, friendly_errors, unreachable
from streams.cli.main import app
from streams.runtime.devstack.ports import free_port


def wrapped(cause: BaseException) -> ProjectionError:
    try:
        raise cause
    except BaseException as exc:
        try:
            raise ProjectionError(f"redis (projection versions): {exc}") from exc
        except ProjectionError as wrapper:
            return wrapper


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (KafkaConnectionError("Unable to bootstrap"), UNREACHABLE),
        (ConnectionRefusedError(111, "Connect call failed"), UNREACHABLE),
        (wrapped(RedisConnectionError("Error 111 connecting")), UNREACHABLE),
        (KafkaTimeoutError("after a leader election"), UNREACHABLE),
        (LeaderNotAvailableError(), UNREACHABLE),
        (TimeoutError("read from the broker took longer than 60 s"), UNREACHABLE),
        (wrapped(httpx.ConnectError("All connection attempts failed")), UNREACHABLE),
        # A wrong password is no outage, though redis-py makes it one of its ConnectionErrors.
        (wrapped(AuthenticationError("invalid username-password pair")), 2),
        (TopicAuthorizationFailedError(), 2),
        (ProjectionError("version 'v1' is active; replay into another one first"), 2),
        (ValueError("a bad name"), 2),
        (FileNotFoundError(2, "No such file"), 2),
    ],
)
def test_a_failure_exits_with_what_a_retry_would_change(exc: Exception, code: int) -> None:
    assert unreachable(exc) is (code == UNREACHABLE)
    with pytest.raises(typer.Exit) as exited, friendly_errors():
        raise exc
    assert exited.value.exit_code == code


def test_a_command_that_cannot_reach_the_broker_exits_75() -> None:
    broker = f"127.0.0.1:{free_port()}"  # nothing listens there
    result = CliRunner().invoke(app, ["publish", "H1", "x"], env={"ENGRAM_KAFKA_BOOTSTRAP": broker})
    assert result.exit_code == UNREACHABLE, result.output
    assert "Traceback" not in result.output
