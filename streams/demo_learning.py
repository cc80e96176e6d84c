"""What the flood households learn in ``engram demo``: each year's damage is feedback on the
decision taken the year before, which moves the success rate of its procedure (seed 000), and
each decision answers the same request, so its plan is cached and looked up the next year
(seed 002)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from projections.learned.reads import PlanLookup, Procedures
from projections.service.client import AsyncEngramClient
from schemas.agent_events import AgentEvent, Decision, Feedback, PlanAction

PLAN_PROMPT = "Protect my house against the coming season"
"""The request every household's yearly decision answers: a repeated request, so a plan
cached one year is a hit the next, until its feedback evicts it."""

SKILL_STEPS = {
    "buy_insurance": ("insurer", "quote for the year", "policy signed"),
    "elevate_house": ("contractor", "raise the house 2 m", "house elevated"),
    "relocate": ("mover", "move to higher ground", "moved"),
    "do_nothing": ("calendar", "review next year", "nothing done"),
}


def with_plan(decision: Decision) -> Decision:
    """The decision with the request it answered and the step it took."""
    tool, given, seen = SKILL_STEPS[decision.skill]
    action = PlanAction(tool=tool, input=given, observation=seen)
    return decision.model_copy(update={"prompt": PLAN_PROMPT, "actions": (action,)})


def outcome_signal(events: list[AgentEvent]) -> float:
    """How the year went for a household, from what happened to it: a major flood or a denied
    claim is a failure of last year's protection (-1), a minor flood, one that did no damage or
    a paid claim a success (+1); a year without a flood says nothing (0)."""
    kinds = {e.kind for e in events}
    if kinds & {"flood.major", "claim.denied"}:
        return -1.0
    if kinds & {"flood.minor", "flood.no_damage", "claim.approved"}:
        return 1.0
    return 0.0


def outcome_feedback(events: list[AgentEvent], last: Decision | None) -> Feedback | None:
    """Feedback on the household's last decision from this year's events, if they say any."""
    if last is None:
        return None
    signal = outcome_signal([e for e in events if e.agent_id == last.agent_id])
    if signal == 0.0:
        return None
    verdict = "paid off" if signal > 0 else "did not protect us"
    return Feedback(
        agent_id=last.agent_id,
        agent_type="household",
        year=events[0].year if events else None,
        target_event_id=last.event_id,
        signal=signal,
        content=f"Last year's choice to {last.skill.replace('_', ' ')} {verdict}",
    )


async def show_plan_lookup(client: AsyncEngramClient, agent_id: str, out: Console) -> PlanLookup:
    lookup = await client.lookup_plan(agent_id, PLAN_PROMPT)
    if lookup.hit and lookup.plan is not None:
        out.print(
            f"   plan cache: [green]hit[/green] {escape(str(lookup.plan.skill))} (similarity "
            f"{lookup.similarity:.2f}, score {lookup.score:.2f})",
            markup=True,
        )
    else:
        out.print("   plan cache: miss")
    return lookup


async def show_procedures(
    client: AsyncEngramClient, agent_ids: list[str], out: Console
) -> dict[str, Procedures]:
    out.rule("Procedures learned from feedback (success rate by EMA, alpha 0.1)")
    learned: dict[str, Procedures] = {}
    for agent_id in agent_ids:
        procedures = await client.procedures(agent_id, min_success_rate=0.0, top_k=10)
        learned[agent_id] = procedures
        shown = ", ".join(
            f"{p.name} {p.success_rate:.3f} ({p.usage_count} uses)" for p in procedures.procedures
        )
        out.print(f"   {agent_id}: {shown or '(none yet)'}")
    return learned
