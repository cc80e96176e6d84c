"""Deleting a dropped version's derived log: a refusal is said with the broker's reason."""

from __future__ import annotations

from streams.eventlog.topic_admin import refused_deletions


def test_a_refused_deletion_is_named_with_the_brokers_reason() -> None:
    answer = [("v1.memory.items", 0), ("v1.memory.lifecycle", 29)]
    assert refused_deletions(answer) == {"v1.memory.lifecycle": "TopicAuthorizationFailedError"}
    assert refused_deletions([("v1.memory.items", 0)]) == {}
