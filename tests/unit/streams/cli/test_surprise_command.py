"""``engram surprise``: seed 003's cognitive system and surprise trace through the command,
against the real query service app served in this process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from streams.cli.main import app
from tests.unit.projections.service.test_surprise_route import Readings, floods
from tests.unit.projections.test_service_validation import app_over
from tests.unit.streams.cli.in_process_service import serving

pytestmark = pytest.mark.timeout(60)

runner = CliRunner()


@pytest.fixture(scope="module")
def service_url() -> Iterator[str]:
    yield from serving(app_over(Readings({"H001": floods(1)})))


def said(agent_id: str, url: str) -> str:
    result = runner.invoke(app, ["surprise", agent_id, "--url", url], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return " ".join(result.stdout.split())


def test_a_surprised_agent_is_shown_in_system_2_with_its_trace(service_url: str) -> None:
    shown = said("H001", service_url)
    assert "H001: SYSTEM_2, arousal 1.000" in shown
    assert "symbolic: observed FLOOD:HIGH, probability 0.000; surprise 1.000" in shown


def test_an_agent_without_a_reading_is_in_system_1(service_url: str) -> None:
    shown = said("H009", service_url)
    assert "H009: SYSTEM_1, arousal 0.000" in shown
    assert "no surprise reading yet" in shown
