"""What ``engram forget-agent`` says it did: never more than the keyring can do."""

from __future__ import annotations

import pytest

from streams.cli.console import console
from streams.cli.privacy import _print_report
from streams.eventlog.publisher import Position
from streams.privacy.forgetting import ForgetReport

AT = Position("memory.schedule", 0, 12)


@pytest.mark.parametrize(
    ("report", "said"),
    [
        # Keys deleted: its sealed events are unreadable, not the ones a client sent unsealed.
        (ForgetReport("B001", AT, ("k1",)), "any it published unsealed"),
        (ForgetReport("B001", AT, ()), "had no sealing key"),
        (ForgetReport("B001", AT, (), sealed=False), "no keyring"),
    ],
)
def test_the_report_says_which_events_stay_readable(report: ForgetReport, said: str) -> None:
    """With a key deleted it said nothing, though an agent's raw events published by a plain
    Kafka client stay readable in the log."""
    with console.capture() as captured:
        _print_report("B001", report, as_json=False)
    assert said in " ".join(captured.get().split())
