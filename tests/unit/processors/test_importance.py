"""Importance per seeds 003 (emotion x source) and 004 (event-type tables), and routing."""

from __future__ import annotations

from pathlib import Path

import pytest

from processors.config import load_processing_config
from processors.importance import classify_emotion, classify_source, importance_of
from processors.routing import destination_for
from schemas.agent_events import Decision, Observation

CONFIG = load_processing_config()
HOUSEHOLD = CONFIG.profile_for("household")
DEFAULT = CONFIG.profile_for("default")


@pytest.mark.parametrize(
    ("kind", "expected", "destination"),
    [
        ("flood.major", 0.9, "episodic"),
        ("flood.minor", 0.6, "working"),
        ("flood.no_damage", 0.4, "working"),
        ("claim.denied", 0.8, "episodic"),
        ("claim.approved", 0.7, "episodic"),
        ("policy.change", 0.5, "working"),
        ("neighbor.adaptation", 0.4, "working"),
    ],
)
def test_seed_004_event_table_for_observations(
    kind: str, expected: float, destination: str
) -> None:
    event = Observation(agent_id="H1", agent_type="household", kind=kind, content="something")
    value, inputs = importance_of(event, HOUSEHOLD)
    assert value == expected
    assert inputs.method == "event_table"
    assert inputs.table_key == kind
    assert destination_for(value) == destination


@pytest.mark.parametrize(
    ("skill", "expected", "destination"),
    [
        ("elevate_house", 0.8, "episodic"),
        ("buy_insurance", 0.7, "episodic"),
        ("relocate", 0.9, "episodic"),
        ("do_nothing", 0.3, "working"),
    ],
)
def test_seed_004_skill_table_for_decisions(skill: str, expected: float, destination: str) -> None:
    event = Decision(agent_id="H1", agent_type="household", skill=skill, content="I did it")
    value, _ = importance_of(event, HOUSEHOLD)
    assert (value, destination_for(value)) == (expected, destination)


def test_explicit_importance_wins_over_the_table() -> None:
    event = Decision(
        agent_id="H1", agent_type="household", skill="relocate", content="x", importance=0.2
    )
    value, inputs = importance_of(event, HOUSEHOLD)
    assert (value, inputs.method) == (0.2, "explicit")


@pytest.mark.parametrize(
    ("content", "source", "emotion", "expected"),
    [
        # seed 003: importance = emotional weight x source weight
        ("My house suffered flood damage", None, "critical", 1.0 * 1.0),
        ("A neighbor saw flood damage downtown", None, "critical", 1.0 * 0.7),
        ("20% of the county had damage", None, "critical", 1.0 * 0.5),
        ("Damage was reported somewhere", None, "critical", 1.0 * 0.3),
        ("I made an important decision", None, "major", 0.9 * 1.0),
        ("The claim was approved for a friend", None, "positive", 0.8 * 0.7),
        ("The sun was out; quiet afternoon", None, "routine", 0.1 * 0.3),
        ("The sun was out; quiet afternoon", "personal", "routine", 0.1 * 1.0),
    ],
)
def test_seed_003_emotion_times_source(
    content: str, source: str | None, emotion: str, expected: float
) -> None:
    event = Observation(agent_id="A", content=content, source=source)
    value, inputs = importance_of(event, DEFAULT)
    assert inputs.method == "emotion_source"
    assert inputs.emotion == emotion
    assert value == pytest.approx(expected)
    assert value == pytest.approx((inputs.emotion_weight or 0) * (inputs.source_weight or 0))


def test_emotion_categories_are_tried_in_profile_order() -> None:
    # "damage" (critical) and "success" (positive) both match: the first category wins.
    assert classify_emotion("success despite damage", (), DEFAULT) == "critical"
    assert classify_emotion("a quiet day", ("flood",), HOUSEHOLD) == "critical"
    assert classify_source("My roof", DEFAULT) == "personal"
    assert classify_source("I", DEFAULT) == "personal"


@pytest.mark.parametrize(
    ("content", "profile", "source"),
    [
        ("The county reported flood damage to some homes", "household", "community"),
        ("Damage to some homes was reported", "default", "abstract"),
        ("Hawaii and the region were flooded", "default", "community"),
        ("The economy of the area suffered", "default", "community"),
        ("Flood waters reached the town hall for an hour", "household", "abstract"),
        ("Four feet of water in the county", "household", "community"),
        ("My basement flooded, and I lost my furniture.", "household", "personal"),
        ("Our street flooded again; me too", "household", "personal"),
        ("I've seen this before", "default", "personal"),
        ("Storm report:\nMy basement flooded", "default", "personal"),
        ('"My basement flooded," said the owner', "household", "personal"),
        ("(my house) flooded; 'our street' too", "household", "personal"),
        ("Tell me.", "default", "personal"),
    ],
)
def test_a_personal_pattern_matches_a_word_not_the_end_of_one(
    content: str, profile: str, source: str
) -> None:
    """ "me " in "some homes", "our " in "hour " or "four ", "i " in "Hawaii ": each made a report
    about others a personal experience, weighing 1.0 instead of 0.5 (community) or 0.3."""
    assert classify_source(content, CONFIG.profile_for(profile)) == source


def test_unknown_agent_types_use_the_default_profile() -> None:
    assert CONFIG.profile_for("martian") is DEFAULT


def test_routing_threshold_is_inclusive_and_configurable() -> None:
    assert destination_for(0.7) == "episodic"
    assert destination_for(0.6999) == "working"
    assert destination_for(0.5, threshold=0.5) == "episodic"


def test_profiles_load_from_a_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "types.yaml"
    path.write_text(
        "default:\n  emotional_weights: {routine: 0.5}\n  source_weights: {abstract: 1.0}\n"
        "trader:\n  emotional_weights: {routine: 0.2}\n  source_weights: {abstract: 0.5}\n"
        "  event_importance: {decision.sell: 0.95}\n"
    )
    config = load_processing_config(path, episodic_threshold=0.9)
    sell = Decision(agent_id="T", agent_type="trader", skill="sell", content="sold")
    value, _ = importance_of(sell, config.profile_for("trader"))
    assert value == 0.95
    chat = Observation(agent_id="T", content="hello")
    assert importance_of(chat, config.profile_for("default"))[0] == 0.5
    assert config.version("e") != CONFIG.version("e")


def test_bad_profiles_are_refused_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "types.yaml"
    path.write_text("household:\n  emotional_weights: {a: 1.5}\n  source_weights: {}\n")
    with pytest.raises(ValueError, match=r"default|\[0, 1\]"):
        load_processing_config(path)


def test_a_pattern_with_punctuation_matches_as_the_text_is_read(tmp_path: Path) -> None:
    """The text's punctuation became spaces and the pattern's did not: "co-worker" and " me."
    never matched again; a pattern of punctuation alone would match any space."""
    path = tmp_path / "types.yaml"
    path.write_text(
        "default:\n  emotional_weights: {routine: 0.5}\n  source_weights: {abstract: 1.0}\n"
        "  source_patterns: {neighbor: [co-worker], personal: [' me.']}\n"
    )
    profile = load_processing_config(path).profile_for("default")
    assert classify_source("My co-worker told me", profile) == "neighbor"
    assert classify_source("They told me.", profile) == "personal"
    path.write_text(path.read_text().replace("[co-worker]", "['--']"))
    with pytest.raises(ValueError, match="a source pattern of neighbor is punctuation alone"):
        load_processing_config(path)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (None, "cannot read the agent types file"),
        ("household: [1\n", "is not valid YAML"),
        ("- household\n", "expected a mapping of agent type to profile"),
    ],
)
def test_an_unreadable_profiles_file_is_named_with_the_reason(
    tmp_path: Path, text: str | None, reason: str
) -> None:
    """A missing file and broken YAML reached the worker as a bare FileNotFoundError and a
    yaml traceback."""
    path = tmp_path / "types.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError, match=reason) as refused:
        load_processing_config(path)
    assert str(path) in str(refused.value)
