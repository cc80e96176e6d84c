"""The order derived events were emitted in, from the two topics they are logged on.

Every reader that applies or folds the derived log (the takeover's fold, replay and rebuild,
the episodic projector) reads ``memory.items`` and ``memory.lifecycle`` independently, and puts
what counts (:mod:`processors.batch_markers`) back in emission order with :func:`causal_order`
before applying it.
"""

from __future__ import annotations

from collections.abc import Iterable

from schemas.memory_events import AgentForgotten, DerivedEvent, MemoryForgotten, derived_topic_of


def _position_key(event: DerivedEvent) -> tuple[str, int, int] | tuple[str]:
    position = event.source_position
    if position is None:
        return (event.event_id,)
    return (position.topic, position.partition, position.offset)


def _source_of(event: DerivedEvent) -> tuple[str, int, int] | None:
    position = event.source_position
    return None if position is None else (position.topic, position.partition, position.offset)


def causal_order(events: Iterable[DerivedEvent]) -> list[DerivedEvent]:
    """The emission order of derived events read back from two topics.

    ``memory.items`` holds the recordings and ``memory.lifecycle`` everything else, each in
    emission order. What one source record derived shares its position: the lifecycle events it
    triggered (summaries, promotions, prunings, and the forgettings promotions caused), then its
    recording, then the forgettings the recording caused. So the lifecycle events are grouped by
    source position, and each group is put before the recording of the same position, after
    every group that precedes it in the lifecycle log.

    Groups of records without a recording (ticks, searches of facts) keep their place among the
    lifecycle groups, but may come out ahead of recordings that derived nothing else and were
    emitted before them. That reordering is harmless: such a recording touches only its new
    memory and working memories, a tick's events only summaries, a search's only the counts of
    facts, so they commute in every projection, and the fold does not depend on their order
    (checked by a property test).

    Applying all recordings before all lifecycle events instead would move a projection's
    applied position past lifecycle events it then skips, and could delete a promoted copy
    before it is written. Forgettings whose cause is not in ``events`` (its recording was lost
    in a partial write) come last. Duplicates (same event id and position) are dropped.
    Partitions are put in order one by one: only within one are the two topics' orders
    comparable.
    """
    # A producer retry can log a record twice; the ids are deterministic, so the first copy is
    # the event and any later one a duplicate, which folding must not see again. A copy has
    # the position of the same source record too: one id derived at two positions (an event
    # id recorded again once its memory was forgotten, and forgotten again) is two events, as
    # the live path applied them.
    seen: set[tuple[str, tuple[str, int, int] | tuple[str]]] = set()
    unique: list[DerivedEvent] = []
    for event in events:
        key = (event.event_id, _position_key(event))
        if key not in seen:
            seen.add(key)
            unique.append(event)
    by_partition: dict[int | None, list[DerivedEvent]] = {}
    for event in unique:
        position = event.source_position
        by_partition.setdefault(None if position is None else position.partition, []).append(event)
    return [e for part in by_partition.values() for e in _erasures_first(_partition_order(part))]


def _erasures_first(ordered: list[DerivedEvent]) -> list[DerivedEvent]:
    """An erasure of a sealed agent goes before every other event of that agent read with it.

    Its group has no recording to anchor it, so :func:`_partition_order` may place it after
    recordings emitted later (a new life of the agent), which it would then erase. Every event
    of the agent's earlier life was sealed with a key the erasure names, and readers of the
    log leave those out (:meth:`streams.privacy.sealing.RecordSealer.learn_forgotten`): what is
    left of
    the agent came after it. An erasure without keys (the agent was never sealed) keeps its
    place: its earlier life is still in the log, and must be erased after it.
    """
    first: dict[str, int] = {}
    moved: list[tuple[int, DerivedEvent]] = []
    for i, event in enumerate(ordered):
        if isinstance(event, AgentForgotten) and event.key_ids:
            moved.append((first.get(event.agent_id, i), event))
        else:
            first.setdefault(event.agent_id, i)
    if not moved:
        return ordered
    out: list[DerivedEvent] = []
    at = {id(e): i for i, e in moved}
    erasures_at: dict[int, list[DerivedEvent]] = {}
    for i, event in moved:
        erasures_at.setdefault(i, []).append(event)
    for i, event in enumerate(ordered):
        out.extend(erasures_at.pop(i, []))
        if id(event) not in at:
            out.append(event)
    return out


def _next_lives(
    recorded: list[DerivedEvent],
    groups: dict[tuple[str, int, int] | tuple[str], list[DerivedEvent]],
    index: dict[tuple[str, int, int] | tuple[str], int],
) -> dict[int, int]:
    """Recordings an erasure must precede: the first of its agent's next life (``seq`` from
    the erasure's ``next_seq`` on), by number in ``recorded``, with the erasure's group. An
    erasure has no recording of its own to anchor it, and left to float it could come after
    recordings of the next life, which it would then erase (an unsealed agent's, whose earlier
    life stays readable, so :func:`_erasures_first` cannot move it first)."""
    anchors: dict[int, int] = {}
    for key, grouped in groups.items():
        for event in grouped:
            if not isinstance(event, AgentForgotten) or event.next_seq is None:
                continue
            # After the last recording of the ended life (a log from before next_seq may hold
            # earlier lives with higher seqs), the first of the next.
            theirs = [
                (number, seq)
                for number, memory in enumerate(recorded)
                if memory.agent_id == event.agent_id
                and (seq := getattr(memory, "seq", None)) is not None
            ]
            ended = max((n for n, seq in theirs if seq < event.next_seq), default=-1)
            first = next((n for n, seq in theirs if n > ended and seq >= event.next_seq), None)
            if first is not None:
                anchors[first] = max(anchors.get(first, -1), index[key])
    return anchors


def _partition_order(events: list[DerivedEvent]) -> list[DerivedEvent]:
    """:func:`causal_order` within one partition number, where both topics hold one worker's
    emissions in order (derived events go to their source's partition number)."""
    recorded = [e for e in events if derived_topic_of(e) == "items"]
    # A recording's forgettings share its position: one id may be recorded at two (an event
    # id used again once its memory was forgotten), each with forgettings of its own.
    recorded_ids = {(e.event_id, _source_of(e)) for e in recorded}
    after: dict[tuple[str, tuple[str, int, int] | None], list[DerivedEvent]] = {}
    groups: dict[tuple[str, int, int] | tuple[str], list[DerivedEvent]] = {}
    for event in events:
        if derived_topic_of(event) == "items":
            continue
        if (
            isinstance(event, MemoryForgotten)
            and (cause := (event.caused_by, _source_of(event))) in recorded_ids
        ):
            after.setdefault(cause, []).append(event)
        else:
            groups.setdefault(_position_key(event), []).append(event)
    keys = list(groups)
    index = {key: i for i, key in enumerate(keys)}
    anchors = _next_lives(recorded, groups, index)
    ordered: list[DerivedEvent] = []
    done = 0
    for number, memory in enumerate(recorded):
        at = max(index.get(_position_key(memory), -1), anchors.get(number, -1))
        if at >= 0 and at >= done:
            for key in keys[done : at + 1]:
                ordered.extend(groups[key])
            done = at + 1
        ordered.append(memory)
        ordered.extend(after.pop((memory.event_id, _source_of(memory)), ()))
    for key in keys[done:]:
        ordered.extend(groups[key])
    for orphans in after.values():
        ordered.extend(orphans)
    return ordered
