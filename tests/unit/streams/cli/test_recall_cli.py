"""``engram recall`` refuses what it cannot run with one readable line and exit code 2, before
it connects to anything."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from streams.cli.main import app

runner = CliRunner()
CONFIGURED = {"ENGRAM_KAFKA_BOOTSTRAP": "127.0.0.1:1", "ENGRAM_REDIS_URL": "redis://127.0.0.1:1"}


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["recall", "H1"], CONFIGURED, "give --as-of POINT or --again RETRIEVAL_ID"),
        (
            ["recall", "H1", "--as-of", "2026-01-01T00:00:00Z", "--again", "last"],
            CONFIGURED,
            "give --as-of POINT or --again RETRIEVAL_ID",
        ),
        (
            ["recall", "H1", "--again", "last"],
            {},
            "set ENGRAM_KAFKA_BOOTSTRAP and ENGRAM_REDIS_URL",
        ),
        (
            ["recall", "H1", "--again", "last", "--mode", "weighted"],
            CONFIGURED,
            "--again runs the recorded request: give no retrieval options",
        ),
        (["recall", "H1", "--again", "last", "--prompt"], CONFIGURED, "give no retrieval options"),
        (["recall", "H1", "--as-of", "yesterday"], CONFIGURED, "--as-of: 'yesterday' is neither"),
        (["recall", "H1", "--as-of", "agent.observations:²:0"], CONFIGURED, "is neither"),
        (
            ["recall", "H1", "--as-of", "2026-01-01T00:00:00Z", "--mode", "relevance"],
            CONFIGURED,
            "invalid retrieval: request: mode 'relevance' ranks by relevance to query",
        ),
        (
            ["recall", "H1", "--as-of", "2026-01-01T00:00:00Z", "--weight", "recency=1"],
            CONFIGURED,
            "--weight applies to --mode weighted or generative",
        ),
    ],
)
def test_bad_input_is_one_readable_error(
    args: list[str], env: dict[str, str], message: str
) -> None:
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_an_invalid_agent_id_is_named_before_the_log_is_read() -> None:
    result = runner.invoke(
        app, ["recall", "no spaces", "--as-of", "2026-01-01T00:00:00Z"], env=CONFIGURED
    )
    assert result.exit_code == 2, result.output
    assert "'no spaces' is not an agent id: it must be 1-200 characters" in result.output
