"""Facts derived at year-end consolidation from patterns the agent keeps observing (seed 000's
semantic memory, "the what without the when", distilled from episodes).

The rule is extractive and deterministic, so a replay and a reprocess derive the same facts:
among the observations in working memory that a consolidation considers (those of the year
that ended), a ``kind`` seen at least ``FactRules.pattern_min_count`` times becomes the fact
``{subject: the agent, attribute: "recurring <kind>", value: the latest such observation's
text}``, its sources those observations (so their number is the pattern's support). It is a
:class:`~schemas.learned_events.FactStated` with ``origin="derived"``: the next year the
pattern holds, a new fact on the same subject and attribute supersedes it, as a stated one
would be.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from processors.facts import fact_text
from processors.learned_state import fact_key, fold_learned
from processors.recording import AgentMemoryState, WorkingEntry
from schemas.learned_events import FactStated
from schemas.memory_events import DerivedEvent, derived_event_id, encode_vector

if TYPE_CHECKING:
    from processors.lifecycle import Deriving, Trigger

PATTERN_PREFIX = "recurring "


def recurring_kinds(
    entries: Sequence[WorkingEntry], min_count: int
) -> list[tuple[str, tuple[WorkingEntry, ...]]]:
    """Each observation kind seen at least ``min_count`` times in ``entries``, with those
    observations in memory order, by kind name (an order independent of arrival)."""
    by_kind: dict[str, list[WorkingEntry]] = {}
    for entry in sorted(entries, key=lambda e: e.seq):
        if entry.source_event_type == "observation" and entry.kind is not None:
            by_kind.setdefault(entry.kind, []).append(entry)
    return [(k, tuple(seen)) for k, seen in sorted(by_kind.items()) if len(seen) >= min_count]


def derive_pattern_facts(
    state: AgentMemoryState,
    considered: Sequence[WorkingEntry],
    trigger: Trigger,
    ctx: Deriving,
    out: list[DerivedEvent],
    *,
    agent_id: str,
) -> AgentMemoryState:
    """Appends to ``out`` the facts the ``considered`` working memories' patterns give, each
    superseding the agent's current fact on its subject and attribute, and returns the state
    with them folded in. The agent type of the latest memory considered sets the rule (an
    agent publishes as one type)."""
    if not considered:
        return state
    latest_type = max(considered, key=lambda e: e.seq).agent_type
    rules = ctx.config.profile_for(latest_type).learning.facts
    if not (rules.enabled and rules.from_patterns):
        return state
    learned = state.learned
    for kind, seen in recurring_kinds(considered, rules.pattern_min_count):
        latest = seen[-1]
        attribute = PATTERN_PREFIX + kind
        what = f"pattern:{agent_id}:{kind}"
        fact = FactStated(
            event_id=derived_event_id(trigger.event_id, f"fact:{what}"),
            fact_id=derived_event_id(trigger.event_id, f"fact:id:{what}"),
            subject=agent_id,
            attribute=attribute,
            value=latest.content,
            valid_from=trigger.occurred_at,
            origin="derived",
            source_event_ids=tuple(e.source_event_id for e in seen),
            supersedes=learned.facts.get(fact_key(agent_id, attribute)),
            embedding=encode_vector(
                ctx.embedder.embed(fact_text(agent_id, attribute, latest.content))
            ),
            agent_id=agent_id,
            occurred_at=trigger.occurred_at,
            step=trigger.step,
            year=trigger.year,
            caused_by=trigger.event_id,
            source_position=trigger.position,
            config_version=ctx.config_version,
        )
        out.append(fact)
        learned = fold_learned(learned, fact)
    return replace(state, learned=learned)
