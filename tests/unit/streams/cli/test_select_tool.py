"""``engram select-tool``: seed 002's example through the command, against the real query
service app served in this process over a :class:`FieldStore`; its help, its refusals (exit 2)
and an unreachable service (exit 75)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from processors.tool_selection import TOOL_SIMILARITY_THRESHOLD
from projections.learned.reads import ToolChoice
from streams.cli.console import UNREACHABLE
from streams.cli.main import app
from streams.runtime.devstack.ports import free_port
from tests.unit.projections.learned.learning_agents import (
    ATTRIBUTE_TOOL,
    HEALTH,
    SPEED,
    FieldStore,
    seed_tools,
)
from tests.unit.projections.test_service_validation import app_over
from tests.unit.streams.cli.in_process_service import serving

pytestmark = pytest.mark.timeout(60)

runner = CliRunner()


@pytest.fixture(scope="module")
def service_url() -> Iterator[str]:
    store = FieldStore()
    seed_tools(store, "P1")
    yield from serving(app_over(learned=store.memory()))


def said(args: list[str], url: str) -> str:
    result = runner.invoke(app, ["select-tool", *args, "--url", url], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return " ".join(result.stdout.split())  # not the log lines another test may have set up


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["P1", SPEED], f"selected {ATTRIBUTE_TOOL}: similarity 0.472 >= 0.4, success rate 0.5000"),
        (
            ["P1", HEALTH],
            f"miss: the closest, {ATTRIBUTE_TOOL}, is 0.280 similar, below 0.4: define a new "
            "tool (a decision with a new skill)",
        ),
        (
            ["P1", HEALTH, "--min-similarity", "0.28"],
            f"selected {ATTRIBUTE_TOOL}: similarity 0.280 >= 0.28",
        ),
        (
            ["P1", SPEED, "--exclude", ATTRIBUTE_TOOL, "--exclude", "Other"],
            "miss: every procedure of P1 was excluded: define a new tool",
        ),
        (["P2", SPEED], "miss: P2 has no procedures yet: define a new tool"),
    ],
)
def test_the_seed_example_is_selected_or_missed(
    service_url: str, args: list[str], line: str
) -> None:
    assert said(args, service_url).startswith(line)


def test_json_prints_the_answer(service_url: str) -> None:
    answer = ToolChoice.model_validate_json(said(["P1", HEALTH, "--json"], service_url))
    assert answer.reason == "below_threshold"
    assert answer.closest is not None
    assert answer.closest.name == ATTRIBUTE_TOOL


def test_the_help_explains_selection_misses_and_exclusion() -> None:
    result = runner.invoke(app, ["select-tool", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for phrase in (
        "Choose the procedure to use as the tool for a request (seed 002)",
        "at least --min-similarity (inclusive), whatever its success rate",
        "the agent should define a new one (publish a decision with a new skill)",
        "ask again with --exclude NAME",
        f"(default: the service's, {TOOL_SIMILARITY_THRESHOLD})",
    ):
        assert phrase in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["P1", SPEED, "--min-similarity", "2"],
            "Invalid value for '--min-similarity': Input should be less than or equal to 1",
        ),
        (["a?b", SPEED], "'a?b' is not an agent id"),
        (["P1", SPEED, "--exclude", ""], "422: exclude.0: String should have at least 1 character"),
        (["P1", ""], "422: prompt: String should have at least 1 character"),
    ],
)
def test_bad_input_is_one_readable_error(service_url: str, args: list[str], message: str) -> None:
    result = runner.invoke(
        app, ["select-tool", *args, "--url", service_url], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_an_unreachable_query_service_exits_75() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = runner.invoke(app, ["select-tool", "P1", SPEED, "--url", url])
    assert result.exit_code == UNREACHABLE
    assert f"cannot reach the query service at {url}" in result.output
