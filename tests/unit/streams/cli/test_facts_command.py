"""``engram facts`` and the sync client show how often searches returned each fact (seed
000's ``access_count``), against the real query service app served in this process over a
:class:`FieldStore` whose agent was searched as the processors count it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from rich.console import Console
from typer.testing import CliRunner

from projections.learned.reads import Facts
from projections.service.client import EngramClient
from streams.cli.learned import facts_table
from streams.cli.main import app
from tests.unit.projections.learned.learning_agents import FieldStore, LearningAgent
from tests.unit.projections.test_service_validation import RecordingHook, app_over
from tests.unit.streams.cli.in_process_service import serving

pytestmark = pytest.mark.timeout(60)

runner = CliRunner()

LONG = "flooded in 1998, 2004 and 2011; raised by two metres in 2013 after the third claim was paid"


@pytest.fixture(scope="module")
def service_url() -> Iterator[str]:
    """P1's premium was returned by three searches, its roof and its long history by none."""
    store, hook = FieldStore(), RecordingHook()
    agent = LearningAgent(store, "P1")
    agent.state_fact("house", "roof", "clay tiles")
    agent.state_fact("flood insurance", "premium", "$1,200 a year")
    agent.state_fact("house", "history", LONG)
    served = serving(app_over(learned=store.memory(), on_retrieval=hook))
    url = next(served)
    with EngramClient(url) as client:
        for _ in range(3):
            client.facts("P1", "flood insurance premium", top_k=1)
    agent.searched(*hook.events)
    yield url
    served.close()


def test_the_sync_client_reads_the_counts(service_url: str) -> None:
    with EngramClient(service_url) as client:
        facts = client.facts("P1")
    assert {f.attribute: f.access_count for f in facts.facts} == {
        "premium": 3,
        "roof": 0,
        "history": 0,
    }


def test_the_command_shows_a_column_of_searches(service_url: str) -> None:
    result = runner.invoke(app, ["facts", "P1", "--url", service_url], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines() if line.strip()]
    assert rows[0] == ["fact", "searched"]
    assert ["flood", "insurance", "premium:", "$1,200", "a", "year", "3"] in rows
    assert ["house", "roof:", "clay", "tiles", "0"] in rows


def test_the_json_carries_the_counts(service_url: str) -> None:
    result = runner.invoke(app, ["facts", "P1", "--url", service_url, "--json"])
    assert result.exit_code == 0, result.output
    answer = Facts.model_validate_json(result.stdout)
    assert {f.attribute: f.access_count for f in answer.facts} == {
        "premium": 3,
        "roof": 0,
        "history": 0,
    }


def test_piped_a_long_fact_stays_on_its_line(service_url: str) -> None:
    """Piped, rich assumes 80 columns: the fact folded onto a second line, cut where a user
    copies it from (``print_whole``)."""
    result = runner.invoke(app, ["facts", "P1", "--url", service_url])
    assert result.exit_code == 0, result.output
    assert any(f"house history: {LONG}" in line for line in result.stdout.splitlines())


async def test_a_fact_superseded_without_its_end_is_shown_not_a_traceback() -> None:
    """``engram facts --history`` formatted a missing end as a date: a traceback."""
    store = FieldStore()
    LearningAgent(store, "P1").state_fact("user", "city", "Paris")
    forgetful = LearningAgent(store, "P1")  # its state keeps no Paris to replace
    forgetful.n = 1
    forgetful.state_fact("user", "city", "Berlin")
    answer = await store.memory().facts("P1", history=True)
    console = Console(width=120, record=True)
    console.print(facts_table(answer))
    shown = console.export_text()
    assert "user city: Paris (superseded)" in shown
    assert "user city: Berlin " in shown
