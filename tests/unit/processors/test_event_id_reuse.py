"""An agent event id used again: refused while its memory is held, a new memory once it is not.

Producers choose event ids, and a producer's retry without idempotence can log one event twice.
Recorded twice while the first memory was held, the live projections kept the second and a
rebuild the first, and the live state held two entries the fold held one of.
"""

from __future__ import annotations

from datetime import timedelta

from processors.batch import RawRecord, process_batch
from processors.emission_order import causal_order
from processors.recording import AgentMemoryState
from schemas.agent_events import Decision, Feedback, Observation
from schemas.codec import encode_event
from schemas.memory_events import MemoryForgotten, MemoryRecorded, SourcePosition, memory_id_for
from tests.agent_streams import CTX, TOPICS
from tests.unit.processors.test_state_fold import OBS, Run, fold, projected, read_back


def _publish(
    run: Run,
    event_id: str,
    importance: float,
    content: str,
    *,
    agent: str = "W1",
    year: int | None = None,
    step: int | None = None,
) -> str | None:
    """Feed one observation as :meth:`Run.feed` does; the dead letter's kind if it was
    refused."""
    run.now += timedelta(seconds=5)
    event = Observation(
        agent_id=agent,
        event_id=event_id,
        content=content,
        importance=importance,
        occurred_at=run.now,
        year=year,
        step=step,
    )
    offset = run.offsets.get(f"{OBS}/0", 0)
    run.offsets[f"{OBS}/0"] = offset + 1
    raw = RawRecord(OBS, 0, offset, agent.encode(), encode_event(event), "observation", "agent")
    result = process_batch(
        [raw], lambda a: run.states.get(a) or AgentMemoryState(), ctx=CTX, failed_at=run.now
    )
    run.states.update(result.states)
    run.derived.extend(result.derived)
    return result.dead_letters[0].error_kind if result.dead_letters else None


def test_an_event_id_whose_memory_is_held_is_refused_and_nothing_changes() -> None:
    run = Run()
    assert _publish(run, "e1", 0.2, "the river is rising") is None
    before, derived = run.states["W1"], list(run.derived)
    assert _publish(run, "e1", 0.95, "a different event under the same id") == "duplicate_event_id"
    assert run.states["W1"] == before
    assert run.derived == derived
    # Held in episodic memory counts too.
    assert _publish(run, "e2", 0.95, "the levee broke") is None
    assert _publish(run, "e2", 0.1, "again") == "duplicate_event_id"


def test_an_event_id_recorded_again_once_forgotten_rebuilds_as_it_ran_live() -> None:
    """e1 is pushed out of working memory (FIFO), recorded again to episodic memory, then
    pushed out of it by more important ones: the log, read back, gives the live projections
    and state."""
    run = Run()
    assert _publish(run, "e1", 0.2, "first life of e1") is None
    for i in range(10):
        assert _publish(run, f"x{i}", 0.1, f"filler {i}") is None
    assert not run.states["W1"].holds(memory_id_for("W1", "e1"))
    assert _publish(run, "e1", 0.9, "second life of e1") is None
    for i in range(50):
        assert _publish(run, f"y{i}", 0.95, f"important {i}") is None
    e1 = memory_id_for("W1", "e1")
    assert [type(e).__name__ for e in run.derived if getattr(e, "memory_id", None) == e1] == [
        "MemoryRecorded",
        "MemoryForgotten",
        "MemoryRecorded",
        "MemoryForgotten",
    ]
    ordered = causal_order(read_back(run.derived))
    assert len(ordered) == len(run.derived)
    assert projected(ordered) == projected(run.derived)
    assert fold(run, ordered).states == run.states


def test_only_a_record_logged_twice_at_one_position_is_a_duplicate() -> None:
    run = Run()
    _publish(run, "e1", 0.2, "first life of e1")
    for i in range(10):
        _publish(run, f"x{i}", 0.1, f"filler {i}")
    _publish(run, "e1", 0.3, "second life of e1")
    as_read = read_back(run.derived)
    lives = [e for e in causal_order(as_read) if isinstance(e, MemoryRecorded)]
    assert [m.content for m in lives if m.source_event_id == "e1"] == [
        "first life of e1",
        "second life of e1",
    ]
    # A producer's retry logs the same record again: read back once.
    assert causal_order(as_read + as_read[:3]) == causal_order(as_read)


def test_a_recording_s_forgettings_follow_it_and_not_an_earlier_one_of_the_same_id() -> None:
    run = Run()
    _publish(run, "e1", 0.2, "first life of e1")
    for i in range(10):
        _publish(run, f"x{i}", 0.1, f"filler {i}")
    _publish(run, "e1", 0.3, "second life of e1")  # pushes the oldest filler left out
    ordered = causal_order(read_back(run.derived))
    second = next(
        i
        for i, e in enumerate(ordered)
        if isinstance(e, MemoryRecorded) and e.content == "second life of e1"
    )
    pushed = ordered[second + 1]
    assert isinstance(pushed, MemoryForgotten)
    assert pushed.memory_id == run.derived[-1].memory_id != memory_id_for("W1", "e1")
    assert pushed.source_position == SourcePosition(topic=OBS, partition=0, offset=11)


def _rebuilds_as_it_ran_live(run: Run) -> None:
    ordered = causal_order(read_back(run.derived))
    assert projected(ordered) == projected(run.derived)
    assert fold(run, ordered).states == run.states


def test_a_memory_whose_promoted_copy_is_held_is_not_promoted_twice() -> None:
    """e1 is promoted at the end of year 1 and leaves working memory; recorded again in year 2,
    it would be promoted again at its end under the copy's id, which the fold keeps once."""
    run = Run()
    _publish(run, "e1", 0.75, "first life of e1", agent="Y1", year=1)
    for name in ("f", "g", "h", "i"):  # f ends year 1: e1 is promoted; i pushes e1 out
        _publish(run, name, 0.3, f"routine {name}", agent="Y1", year=2)
    assert _publish(run, "e1", 0.75, "second life of e1", agent="Y1", year=2) is None
    _publish(run, "j", 0.3, "year 3 begins", agent="Y1", year=3)
    copies = [e for e in run.derived if type(e).__name__ == "MemoryPromoted"]
    assert len(copies) == 1
    copy = copies[0].memory_id
    assert [e.memory_id for e in run.states["Y1"].episodic].count(copy) == 1
    _rebuilds_as_it_ran_live(run)


def test_a_summary_whose_trigger_made_one_that_is_held_is_not_made_twice() -> None:
    """e3 ends step 1's session (an L1 summary named after e3); recorded again once forgotten,
    it ends step 5's session, whose summary would take the same id: it waits instead."""
    run = Run()
    _publish(run, "a", 0.3, "step one a", agent="S1", step=0)
    _publish(run, "b", 0.3, "step one b", agent="S1", step=0)
    _publish(run, "e3", 0.3, "step two", agent="S1", step=1)
    first = [e for e in run.derived if type(e).__name__ == "MemorySummarised"]
    assert [s.source_event_id for s in first] == ["e3"]
    for name, step in (("c", 1), ("d", 1), ("e", 1), ("f", 1)):  # pushes e3 out
        _publish(run, name, 0.3, f"step two {name}", agent="S1", step=step)
    assert _publish(run, "e3", 0.3, "step three", agent="S1", step=2) is None
    summaries = [e.memory_id for e in run.derived if type(e).__name__ == "MemorySummarised"]
    assert len(summaries) == len(set(summaries))
    _rebuilds_as_it_ran_live(run)


DEC, FEEDBACK = TOPICS.decisions, TOPICS.feedback


def _feed(run: Run, event: Observation | Decision | Feedback) -> str | None:
    """Feed one agent event of W1 on its own topic; the dead letter's kind if refused."""
    topic = {"observation": OBS, "decision": DEC, "feedback": FEEDBACK}[event.event_type]
    offset = run.offsets.get(topic, 0)
    run.offsets[topic] = offset + 1
    raw = RawRecord(topic, 0, offset, b"W1", encode_event(event), event.event_type, "agent")
    result = process_batch(
        [raw], lambda a: run.states.get(a) or AgentMemoryState(), ctx=CTX, failed_at=run.now
    )
    run.states.update(result.states)
    run.derived.extend(result.derived)
    return result.dead_letters[0].error_kind if result.dead_letters else None


def _at(run: Run, **fields: object) -> dict[str, object]:
    run.now += timedelta(seconds=5)
    return {"agent_id": "W1", "occurred_at": run.now, "importance": 0.2, **fields}


def _push_out(run: Run) -> None:
    """Enough routine observations to push every earlier working memory out."""
    for i in range(CTX.config.working_capacity + 1):
        _publish(run, f"routine-{run.now.timestamp()}-{i}", 0.1, f"routine {i}")


def test_a_decision_id_whose_decision_is_still_known_is_refused() -> None:
    """Feedback on d1 would credit the first decision's skill, not the second's."""
    run = Run()
    first = Decision.model_validate(
        _at(run, event_id="d1", content="I buy insurance", skill="buy_insurance")
    )
    assert _feed(run, first) is None
    _push_out(run)
    assert not run.states["W1"].holds(memory_id_for("W1", "d1"))
    again = Decision.model_validate(
        _at(run, event_id="d1", content="I elevate the house", skill="elevate_house")
    )
    assert _feed(run, again) == "duplicate_event_id"
    assert "elevate_house" not in run.states["W1"].learned.procedures
    # Nor as an observation: feedback on d1 would still find the decision.
    observed = Observation.model_validate(_at(run, event_id="d1", content="I saw a flood"))
    assert _feed(run, observed) == "duplicate_event_id"


def test_an_observation_id_whose_fact_is_still_current_is_refused() -> None:
    """Stated again under the same id, the fact superseded itself and no fact was current."""
    run = Run()
    fact = {"subject": "house", "attribute": "elevation"}
    first = Observation.model_validate(
        _at(run, event_id="o1", content="3 ft up", fact=fact | {"value": "3 ft"})
    )
    assert _feed(run, first) is None
    _push_out(run)
    again = Observation.model_validate(
        _at(run, event_id="o1", content="now 5 ft up", fact=fact | {"value": "5 ft"})
    )
    assert _feed(run, again) == "duplicate_event_id"
    # Without a fact, the same id records a new memory: nothing it taught is held.
    plain = Observation.model_validate(_at(run, event_id="o1", content="just an observation"))
    assert _feed(run, plain) is None


def test_a_decision_id_is_refused_while_among_the_latest_128_decisions_and_free_after() -> None:
    """Feedback counts on an agent's latest 128 decisions (``MAX_RECENT_DECISIONS``), so their
    ids stay taken that long, memory or not: d1, its memory long out of working memory, is
    refused among 128 decisions. The 129th pushes it out: feedback on d1 then teaches nothing
    (no procedure, plan or rating: its memory is gone too), and d1 records a new memory."""
    run = Run()

    def decision(event_id: str, skill: str, content: str) -> Decision:
        return Decision.model_validate(_at(run, event_id=event_id, content=content, skill=skill))

    assert _feed(run, decision("d1", "buy_insurance", "I buy insurance")) is None
    for i in range(2, 129):
        assert _feed(run, decision(f"d{i}", "elevate_house", f"I raise the house {i} cm")) is None
    assert not run.states["W1"].holds(memory_id_for("W1", "d1"))
    again = decision("d1", "sell_house", "I sell the house")
    assert _feed(run, again) == "duplicate_event_id"

    assert _feed(run, decision("d129", "elevate_house", "I raise the house 129 cm")) is None
    before = len(run.derived)
    upvote = Feedback.model_validate(_at(run, event_id="f1", target_event_id="d1", signal=1.0))
    assert _feed(run, upvote) is None
    assert {type(e).__name__ for e in run.derived[before:]} == {
        "MemoryRecorded",
        "MemoryForgotten",
    }  # the feedback's own memory, which pushes the oldest working one out
    assert run.states["W1"].learned.procedures["buy_insurance"].usage_count == 0
    assert _feed(run, again) is None
    assert "sell_house" in run.states["W1"].learned.procedures
    _rebuilds_as_it_ran_live(run)
