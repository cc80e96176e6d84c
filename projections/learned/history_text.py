"""How ``engram history`` tells what an agent learned: one line per learned event."""

from __future__ import annotations

from typing import Literal, assert_never

from schemas.learned_events import (
    FactAccessed,
    FactStated,
    LearnedEvent,
    MemoryRated,
    PlanChanged,
    ProcedureChanged,
)

LearnedKind = Literal["procedure", "plan", "fact", "rated", "fact_accessed"]


def describe_learned(event: LearnedEvent) -> tuple[LearnedKind, str | None, tuple[str, ...], str]:
    """The entry's kind, memory id, related ids and text (as ``projections.history``)."""
    match event:
        case ProcedureChanged():
            return ("procedure", None, (event.decision_event_id,), _procedure_text(event))
        case PlanChanged():
            return ("plan", None, (event.plan_id, event.decision_event_id), _plan_text(event))
        case FactStated():
            replaced = f", superseding {event.supersedes[:8]}" if event.supersedes else ""
            derived = ""
            if event.origin == "derived":
                derived = f" (a pattern of {len(event.source_event_ids)} observations)"
            text = f"fact {event.subject} {event.attribute} = {event.value!r}{derived}{replaced}"
            related = (
                (event.fact_id,) if event.supersedes is None else (event.fact_id, event.supersedes)
            )
            return ("fact", None, related, text)
        case MemoryRated():
            text = (
                f"feedback {event.signal:+.2f} counted on the memory: "
                f"{event.upvotes} up, {event.downvotes} down"
            )
            return ("rated", event.memory_id, (event.target_event_id,), text)
        case FactAccessed():
            times = "once" if event.access_count == 1 else f"{event.access_count} times"
            text = (
                f"fact {event.subject} {event.attribute} returned by a search (rank "
                f"{event.rank}): returned {times} in all"
            )
            return ("fact_accessed", None, (event.fact_id, event.caused_by), text)
        case _:
            assert_never(event)


def _procedure_text(event: ProcedureChanged) -> str:
    state = f"success rate {event.success_rate:.4f}, {event.usage_count} uses"
    if event.change == "created":
        return f"procedure {event.name} created ({state})"
    if event.change == "invoked":
        return f"procedure {event.name} invoked by a decision ({state})"
    result = "success" if event.outcome == 1.0 else "failure"
    attached = ", the decision's text attached" if event.attached is not None else ""
    return f"procedure {event.name}: {result} (signal {event.signal:+.2f}), {state}{attached}"


def _plan_text(event: PlanChanged) -> str:
    short = event.plan_id[:8]
    if event.change == "cached":
        return f"plan {short} cached ({len(event.actions)} steps) for {event.prompt!r}"
    if event.change == "scored":
        return f"plan {short} scored {event.score:.3f} (reward {event.reward:g})"
    return (
        f"plan {short} evicted ({event.reason}: score {event.score:.3f}, "
        f"epsilon {event.score_threshold:g})"
    )
