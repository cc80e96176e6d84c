"""The command line answers bad input and unreachable servers with one readable line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from streams.cli import app
from streams.devstack.ports import free_port

runner = CliRunner()


def closed_port() -> int:
    return free_port()  # nothing listens there once the probe socket is closed


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["publish", "H1", "x"], {}, "ENGRAM_KAFKA_BOOTSTRAP"),
        (
            ["publish", "bad id", "x", "--importance", "3"],
            {"ENGRAM_KAFKA_BOOTSTRAP": "x:1"},
            "importance: Input should be less than or equal to 1",
        ),
        (
            ["publish", "H1", "x", "--type", "decision"],
            {"ENGRAM_KAFKA_BOOTSTRAP": "x:1"},
            "needs --skill",
        ),
        (["retrieve", "H1", "--mode", "psychic"], {}, "invalid retrieval: mode: Input should be"),
        (["retrieve", "H1", "--mode", "relevance"], {}, "give a query"),
        (["retrieve", "H1", "--kind", "dream"], {}, "invalid retrieval: filter.kinds.0"),
        (["worker"], {}, "cluster mode needs"),
        (["worker"], {"ENGRAM_PARTITIONS": "zero"}, "partitions: Input should be a valid integer"),
    ],
)
def test_bad_input_is_one_readable_error(
    args: list[str], env: dict[str, str], message: str
) -> None:
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert "errors.pydantic.dev" not in result.output


def test_an_unreachable_query_service_is_named() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    result = runner.invoke(app, ["retrieve", "H1", "--url", url])
    assert result.exit_code == 2
    assert f"cannot reach the query service at {url}" in result.output
    assert "Exit" not in result.output


def test_schemas_are_exported(tmp_path: Path) -> None:
    result = runner.invoke(app, ["schemas", "export", str(tmp_path)])
    assert result.exit_code == 0, result.output
    listed = result.output.split()
    assert str(tmp_path / "observation.v1.schema.json") in listed
    assert all(Path(p).exists() for p in listed)
