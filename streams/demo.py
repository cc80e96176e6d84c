"""The flood households of seed 004, run through a live Engram.

Each simulated year, every household lives through the year's flood (if any), files claims,
watches its neighbours, then recalls its memories over HTTP before it decides, and the
decision becomes a memory too. Importance comes from the 004 event-type tables (sections 5.2
and 10) via the ``household`` profile. The next year's damage is feedback on that decision:
procedures' success rates move, and the yearly plan is cached, reused and evicted
(:mod:`streams.demo_learning`). At the end the Year-11 trace of seed 003 is replayed:
the Year-1 flood must beat the Year-10 gardening day under the v2 weighted score (0.38 vs
0.315).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from projections.history import AgentHistory
from projections.learned.reads import PlanLookup, Procedures
from projections.retrieval.models import RetrievalResponse
from projections.service.client import AsyncEngramClient
from schemas.agent_events import AgentEvent, Decision, Observation
from streams.demo_learning import outcome_feedback, show_plan_lookup, show_procedures, with_plan
from streams.eventlog.publisher import AsyncPublisher
from streams.worker.pipeline import IngestStats

FLOOD_YEARS = {1: 70_000, 3: 8_000, 6: 90_000, 9: 30_000}
"""Base damage of the floods that hit the town, by year (varied per household)."""

SKILL_MEMORY = {
    "buy_insurance": (
        "Year {year}: I purchased flood insurance (premium: ${premium:,.0f})",
        ("decision", "insurance"),
    ),
    "elevate_house": (
        "Year {year}: I elevated my house with {subsidy:.0%} subsidy",
        ("decision", "elevation"),
    ),
    "relocate": ("Year {year}: I relocated to a safer area", ("decision", "relocation")),
    "do_nothing": (
        "Year {year}: I chose to wait and not take protective action",
        ("decision", "inaction"),
    ),
}
"""The skill -> memory templates of seed 004, section 10.2."""


@dataclass
class Household:
    agent_id: str
    rng: random.Random
    insured: bool = False
    elevated: bool = False
    relocated: bool = False
    major_floods: int = 0
    denied_claims: int = 0


@dataclass
class DemoOutcome:
    recalls: dict[tuple[str, int], RetrievalResponse] = field(default_factory=dict)
    decisions: dict[tuple[str, int], str] = field(default_factory=dict)
    trace: RetrievalResponse | None = None
    summaries: RetrievalResponse | None = None
    history: AgentHistory | None = None
    events_published: int = 0
    plan_lookups: dict[tuple[str, int], PlanLookup] = field(default_factory=dict)
    procedures: dict[str, Procedures] = field(default_factory=dict)


def year_events(house: Household, year: int) -> list[AgentEvent]:
    """What happens to one household in one year, before it decides (seed 004, 10.3)."""
    events: list[AgentEvent] = []
    base = FLOOD_YEARS.get(year)
    common = {"agent_id": house.agent_id, "agent_type": "household", "year": year}
    if base is not None:
        damage = 0.0 if house.relocated else base * house.rng.uniform(0.6, 1.4)
        if house.elevated:
            damage *= 0.1
        if damage > 0:
            severity = "major" if damage > 50_000 else "minor"
            house.major_floods += severity == "major"
            events.append(
                Observation(
                    **common,
                    kind=f"flood.{severity}",
                    tags=("flood", severity),
                    source="personal",
                    content=f"Year {year}: A {severity} flood caused ${damage:,.0f} in damages",
                )
            )
            if house.insured:
                if house.rng.random() < 0.25:
                    house.denied_claims += 1
                    events.append(
                        Observation(
                            **common,
                            kind="claim.denied",
                            tags=("insurance", "claim", "denied"),
                            content=f"Year {year}: My insurance claim was denied",
                        )
                    )
                else:
                    events.append(
                        Observation(
                            **common,
                            kind="claim.approved",
                            tags=("insurance", "claim", "approved"),
                            content=f"Year {year}: Insurance paid "
                            f"${damage * 0.8:,.0f} for my claim",
                        )
                    )
        else:
            events.append(
                Observation(
                    **common,
                    kind="flood.no_damage",
                    tags=("flood", "no_damage"),
                    content=f"Year {year}: A flood occurred but caused no damage to my property",
                )
            )
    if house.rng.random() < 0.3:
        events.append(
            Observation(
                **common,
                kind="neighbor.adaptation",
                tags=("neighbor",),
                source="neighbor",
                content=f"Year {year}: My neighbor raised their house on stilts",
            )
        )
    return events


def choose(house: Household, recalled: RetrievalResponse) -> str:
    """A simple protection-motivation rule on what the household recalls, not on its state."""
    texts = " ".join(m.content.lower() for m in recalled.results)
    if house.relocated:
        return "do_nothing"
    if house.denied_claims and house.major_floods >= 2:
        return "relocate"
    if "flood" in texts and not house.insured:
        return "buy_insurance"
    if texts.count("major flood") >= 2 and not house.elevated:
        return "elevate_house"
    return "do_nothing"


def decision_event(house: Household, year: int, skill: str) -> Decision:
    template, tags = SKILL_MEMORY[skill]
    premium = 1_200 + 100 * house.major_floods
    content = template.format(year=year, premium=premium, subsidy=0.5)
    if skill == "buy_insurance":
        house.insured = True
    elif skill == "elevate_house":
        house.elevated = True
    elif skill == "relocate":
        house.relocated = True
    return Decision(
        agent_id=house.agent_id,
        agent_type="household",
        year=year,
        skill=skill,
        content=content,
        tags=tags,
        parameters={"premium": premium},
    )


TRACE_AGENT = "H-TRACE"


def trace_events() -> list[Observation]:
    """The two memories of seed 003, section 2, with their stated importance and tags."""
    return [
        Observation(
            agent_id=TRACE_AGENT,
            agent_type="household",
            year=1,
            importance=1.0,
            tags=("Flood",),
            content="Year 1: A massive flood breached the levee. My basement was under 2 feet of "
            "water, and I lost all my furniture. It was terrifying.",
        ),
        Observation(
            agent_id=TRACE_AGENT,
            agent_type="household",
            year=10,
            importance=0.1,
            tags=("Routine",),
            content="Year 10: The sun was out all day. I spent the afternoon gardening in the "
            "backyard. It was a normal, quiet Saturday.",
        ),
    ]


async def run_demo(
    publisher: AsyncPublisher,
    client: AsyncEngramClient,
    stats: IngestStats,
    *,
    households: int = 4,
    years: int = 10,
    seed: int = 4,
    console: Console | None = None,
    timeout: float = 30.0,
) -> DemoOutcome:
    out = console or Console(quiet=True)
    outcome = DemoOutcome()
    houses = [
        Household(f"H{i:03d}", random.Random(f"{seed}-{i}")) for i in range(1, households + 1)
    ]
    last: dict[str, Decision] = {}
    """Each household's latest decision: the next year's outcome is feedback on it."""
    for year in range(1, years + 1):
        flood = FLOOD_YEARS.get(year)
        flooded = f"  [red]flood (base damage ${flood:,})[/red]" if flood else ""
        out.rule(Text.from_markup(f"Year {year}{flooded}"))
        happened = [e for house in houses for e in year_events(house, year)]
        feedback = [outcome_feedback(happened, last.get(house.agent_id)) for house in houses]
        happened.extend(f for f in feedback if f is not None)
        await stats.wait_for(await publisher.publish_many(happened), timeout)
        outcome.events_published += len(happened)
        decisions = []
        for house in houses:
            recalled = await client.retrieve(
                house.agent_id, top_k=5, current_year=year, mode="two_phase"
            )
            outcome.recalls[(house.agent_id, year)] = recalled
            skill = choose(house, recalled)
            outcome.decisions[(house.agent_id, year)] = skill
            decision = with_plan(decision_event(house, year, skill))
            decisions.append(decision)
            last[house.agent_id] = decision
            who = escape(house.agent_id)
            out.print(f"[bold]{who}[/bold] recalls before deciding:", markup=True)
            for m in recalled.results:
                out.print(
                    f"   {m.score:5.3f} [dim]{m.store:8}[/dim] {escape(m.content)}", markup=True
                )
            if not recalled.results:
                out.print("   (nothing yet)")
            lookup = await show_plan_lookup(client, house.agent_id, out)
            outcome.plan_lookups[(house.agent_id, year)] = lookup
            # The choice follows what it recalls; a cached plan of another skill is set aside.
            cached = lookup.plan.skill if lookup.hit and lookup.plan is not None else None
            how = ""
            if cached == skill:
                how = " (the cached plan)"
            elif cached is not None:
                how = f" (not the cached {escape(cached)}: what it recalls weighs more)"
            out.print(f"   -> decides [cyan]{escape(skill)}[/cyan]{how}", markup=True)
        await stats.wait_for(await publisher.publish_many(decisions), timeout)
        outcome.events_published += len(decisions)

    outcome.procedures = await show_procedures(client, [h.agent_id for h in houses], out)
    await show_memory_over_time(client, houses[0].agent_id, years, out, outcome)

    out.rule("Year 11: the trace of seed 003 (v2 weighted, tags Flood, Danger, Rain)")
    await stats.wait_for(await publisher.publish_many(trace_events()), timeout)
    trace = await client.retrieve(
        TRACE_AGENT, top_k=2, current_year=11, mode="weighted", tags=["Flood", "Danger", "Rain"]
    )
    outcome.trace = trace
    for m in trace.results:
        out.print(f"   {m.score:5.3f}  {m.content[:60]}...")
    first = trace.results[0].content if trace.results else ""
    verdict = "reproduced" if first.startswith("Year 1:") else "NOT reproduced"
    out.print(
        f"The Year-1 flood beats the Year-10 gardening day: [bold]{verdict}[/bold]", markup=True
    )
    return outcome


async def show_memory_over_time(
    client: AsyncEngramClient, agent_id: str, year: int, out: Console, outcome: DemoOutcome
) -> None:
    """The lifecycle of one household's memory: its session summaries (one per year ended) and
    chapter summary, and what its history on the log says happened (seeds 001, 003, 004)."""
    out.rule(f"Memory over time: {agent_id}")
    summaries = await client.retrieve(agent_id, levels=[1, 2], top_k=3, current_year=year)
    outcome.summaries = summaries
    for m in summaries.results:
        out.print(f"   L{m.level} {m.content[:110]}")
    history = await client.history(agent_id, limit=1000)
    outcome.history = history
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(history.counts.items()))
    out.print(f"   history on the log: {counts}")
