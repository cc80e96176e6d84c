"""The replication settings reach every topic Engram creates: its own, a reprocess's, an
imported archive's and Faust's."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from streams.eventlog.topic_admin import ONE_COPY, TopicReplication
from streams.settings import EngramSettings
from streams.worker.app import create_processor_app

ROOT = Path(__file__).resolve().parents[4]


def settings(tmp_path: Path, **values: Any) -> EngramSettings:
    return EngramSettings(data_dir=tmp_path, **values)


def test_the_defaults_suit_the_one_node_dev_broker(tmp_path: Path) -> None:
    replication = TopicReplication.from_settings(settings(tmp_path))
    assert replication == ONE_COPY
    topic = replication.new_topic("agent.observations", 4)
    assert (topic.name, topic.num_partitions, topic.replication_factor) == (
        "agent.observations",
        4,
        1,
    )
    # Unset: the broker's own min.insync.replicas applies.
    assert topic.topic_configs == {"retention.ms": "-1"}


def test_production_values_become_the_replicas_and_min_insync_of_a_new_topic(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ENGRAM_TOPIC_REPLICATION_FACTOR", "3")
    monkeypatch.setenv("ENGRAM_TOPIC_MIN_INSYNC_REPLICAS", "2")
    topic = TopicReplication.from_settings(settings(tmp_path)).new_topic("memory.items", 12)
    assert topic.replication_factor == 3
    assert topic.topic_configs == {"retention.ms": "-1", "min.insync.replicas": "2"}


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"topic_replication_factor": 2, "topic_min_insync_replicas": 3}, "exceeds"),
        ({"topic_replication_factor": 0}, "topic_replication_factor"),
        ({"topic_min_insync_replicas": 0}, "topic_min_insync_replicas"),
    ],
)
def test_replication_that_cannot_work_is_refused_when_read(
    tmp_path: Path, values: dict[str, int], needle: str
) -> None:
    with pytest.raises(ValidationError, match=needle):
        settings(tmp_path, **values)


def test_faust_declares_its_topics_with_the_settings_replication(tmp_path: Path) -> None:
    configured = settings(tmp_path, topic_replication_factor=3, topic_min_insync_replicas=2)
    app = create_processor_app(configured, "127.0.0.1:1").app
    assert app.conf.topic_replication_factor == 3
    # The assignor's leader topic, which Faust creates itself when a worker starts.
    leader = app._leader_assignor._leader_topic  # type: ignore[attr-defined]
    assert leader.replicas == 3
    assert leader.config == {"min.insync.replicas": "2"}
    # A topic's own configs win over the added ones.
    own = app.topic("t", config={"min.insync.replicas": "3", "cleanup.policy": "compact"})
    assert own.config == {"min.insync.replicas": "3", "cleanup.policy": "compact"}


def _calls(path: Path, names: set[str]) -> list[ast.Call]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in names:
                found.append(node)
    return found


def test_every_topic_creation_in_the_code_passes_the_settings_replication() -> None:
    """A call that falls back to one copy would put a keep-forever topic on one disk."""
    creators = {"ensure_topics", "import_log", "Reprocess"}
    missing = []
    for path in sorted((ROOT / "streams").rglob("*.py")):
        for call in _calls(path, creators):
            if "replication" not in {k.arg for k in call.keywords}:
                missing.append(f"{path.relative_to(ROOT)}:{call.lineno}")
        if path.name != "topic_admin.py" and _calls(path, {"NewTopic"}):
            missing.append(f"{path.relative_to(ROOT)}: NewTopic outside TopicReplication")
    assert not missing, missing
    # The test sees the calls it is about.
    assert _calls(ROOT / "streams" / "runtime" / "node.py", {"ensure_topics"})
