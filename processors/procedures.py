"""Procedures (seed 000's procedural memory): a decision's ``skill`` with a success rate that
feedback on the agent's decisions moves by an exponential moving average.

The first decision with a skill creates its procedure at ``initial_success_rate`` (0.5) with
no uses, described by that decision's text; every later one invokes it. Feedback on a decision
is an outcome of its procedure: ``signal > 0`` a success (1), ``< 0`` a failure (0), ``0``
nothing; ``rate = (1 - alpha) x rate + alpha x outcome`` (alpha 0.1), one more use. An upvoted
decision's text is attached to its procedure (seed 002's additional prompt embeddings), so
recall finds the skill by what it was used for.
"""

from __future__ import annotations

from processors.learned_state import (
    DECISION_TEXT_CHARS,
    DecisionEntry,
    LearnedState,
    ProcedureEntry,
)
from processors.learning_cause import Cause
from processors.learning_config import ProcedureRules
from schemas.agent_events import Decision, Feedback
from schemas.learned_events import AttachedText, ProcedureChanged
from schemas.memory_events import encode_vector

DESCRIPTION_CHARS = 1000
"""A procedure's description: the first decision's text, up to this many characters."""


def ema(rate: float, outcome: float, alpha: float) -> float:
    """``(1 - alpha) x rate + alpha x outcome``: 0.5, then a success with alpha 0.1, 0.55."""
    return (1.0 - alpha) * rate + alpha * outcome


def outcome_of(signal: float) -> float | None:
    """A success (1.0), a failure (0.0), or no outcome (None) for a neutral signal."""
    if signal > 0:
        return 1.0
    if signal < 0:
        return 0.0
    return None


def on_decision(
    decision: Decision, learned: LearnedState, rules: ProcedureRules, cause: Cause
) -> ProcedureChanged | None:
    """The procedure created or invoked by ``decision``; None when procedures are off, or
    when the agent has ``max_procedures`` already and this skill is new."""
    if not rules.enabled:
        return None
    known = learned.procedures.get(decision.skill)
    common = {
        **cause.envelope(),
        "name": decision.skill,
        "decision_event_id": decision.event_id,
        # Seed 002 attaches the upvoted *prompt* to the tool: the request the decision
        # answered, its content when it names none.
        "decision_text": (decision.prompt or decision.content)[:DECISION_TEXT_CHARS],
    }
    if known is not None:
        return ProcedureChanged(
            event_id=cause.event_id("procedure:invoked"),
            change="invoked",
            success_rate=known.success_rate,
            usage_count=known.usage_count,
            revision=known.revision,
            attached_count=known.attached_count,
            **common,
        )
    if len(learned.procedures) >= rules.max_procedures:
        return None
    description = decision.content[:DESCRIPTION_CHARS]
    return ProcedureChanged(
        event_id=cause.event_id("procedure:created"),
        change="created",
        success_rate=rules.initial_success_rate,
        usage_count=0,
        revision=0,
        description=description,
        description_embedding=encode_vector(cause.embedder.embed(description)),
        **common,
    )


def on_feedback(
    feedback: Feedback,
    decision: DecisionEntry,
    learned: LearnedState,
    rules: ProcedureRules,
    cause: Cause,
) -> ProcedureChanged | None:
    """The outcome of ``decision``'s procedure that ``feedback`` reports, if any."""
    outcome = outcome_of(feedback.signal)
    known = learned.procedures.get(decision.skill)
    if not rules.enabled or outcome is None or known is None:
        return None
    attached = None
    attached_count = known.attached_count
    if outcome == 1.0 and rules.max_attached > 0 and decision.text:
        attached = AttachedText(
            text=decision.text,
            embedding=encode_vector(cause.embedder.embed(decision.text)),
            slot=attached_count % rules.max_attached,
            decision_event_id=feedback.target_event_id,
        )
        attached_count += 1
    return ProcedureChanged(
        event_id=cause.event_id("procedure:outcome"),
        change="outcome",
        name=decision.skill,
        success_rate=ema(known.success_rate, outcome, rules.alpha),
        usage_count=known.usage_count + 1,
        revision=known.revision + 1,
        decision_event_id=feedback.target_event_id,
        outcome=outcome,
        signal=feedback.signal,
        alpha=rules.alpha,
        attached=attached,
        attached_count=attached_count,
        **cause.envelope(),
    )


def entry_of(event: ProcedureChanged) -> ProcedureEntry:
    return ProcedureEntry(
        event.success_rate, event.usage_count, event.revision, event.attached_count
    )
