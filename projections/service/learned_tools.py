"""The learned-memory tools for LLM agents (seed 000's ``recall_fact`` and
``recall_procedure``, seed 002's cache lookup and tool selection) and ``give_feedback``, which
publishes the feedback everything here learns from."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

from pydantic import BaseModel, Field, ValidationError

from projections.learned.reads import (
    DEFAULT_MIN_SUCCESS_RATE,
    MAX_EXCLUDED_TOOLS,
    Facts,
    PlanLookup,
    Procedures,
    ToolChoice,
)
from projections.retrieval.models import RecordPosition
from projections.service.client import (
    InvalidServiceURLError,
    QueryError,
    ServiceUnreachableError,
    UnreadableAnswerError,
)
from projections.service.tools import (
    MAX_RETRIEVE,
    MemoryTool,
    PublishedObservation,
    Query,
    ToolContext,
    ToolError,
    ToolResult,
    _problems,
    _ToolInput,
)
from schemas.agent_events import Feedback, Skill
from schemas.envelope import AgentId, EventId

_AGENT = "Your agent id: whose memory this is."
T = TypeVar("T")


async def _asked(context: ToolContext, call: Callable[[], Awaitable[T]]) -> T:
    """The service's answer, its failures as :class:`ToolError` for the model."""
    try:
        return await call()
    except QueryError as exc:
        raise ToolError(f"the memory service failed ({exc.status}): {exc.message}") from None
    except ServiceUnreachableError as exc:
        raise ToolError(f"cannot reach the memory service: {exc.reason}") from None
    except UnreadableAnswerError as exc:
        raise ToolError(f"the memory service answered unreadably: {exc}") from None
    except InvalidServiceURLError as exc:  # a configuration no retry changes
        raise ToolError(f"the memory service cannot be called: {exc}") from None


class RecallFactInput(_ToolInput):
    agent_id: AgentId = Field(description=_AGENT, examples=["H001"])
    query: Query = Field(description="What you want to know, in words.")
    limit: int = Field(default=MAX_RETRIEVE, ge=1, le=MAX_RETRIEVE, description="How many.")
    history: bool = Field(default=False, description="Also facts that were superseded.")


async def _recall_fact(context: ToolContext, args: RecallFactInput) -> ToolResult:
    answer = await _asked(
        context,
        lambda: context.memory.facts(
            args.agent_id, args.query, top_k=args.limit, history=args.history
        ),
    )
    lines = ["=== FACTS ==="] + [
        f"- {f.subject} {f.attribute}: {f.value}"
        + ("" if f.confidence == 1.0 else f" (confidence {f.confidence:g})")
        + ("" if f.current else f" ({_until(f.valid_to, '%Y-%m-%d')}superseded)")
        + _searched(f.access_count)
        for f in answer.facts
    ]
    return ToolResult(answer, "\n".join(lines) if answer.facts else "No facts known.")


def _until(valid_to: datetime | None, form: str) -> str:
    """When a superseded fact stopped holding; a fact found superseded without its end (one
    the worker's bounded tracking left unended) has none to give."""
    return "" if valid_to is None else f"until {valid_to:{form}}, "


def _searched(count: int) -> str:
    """How often earlier searches returned a fact (its access count), for the model."""
    if count == 0:
        return " (no earlier search returned it)"
    return f" (returned by {count} earlier search{'' if count == 1 else 'es'})"


class RecallProcedureInput(_ToolInput):
    agent_id: AgentId = Field(description=_AGENT, examples=["H001"])
    context: Query = Field(description="The situation at hand, in words.")
    min_success_rate: float = Field(
        default=DEFAULT_MIN_SUCCESS_RATE, ge=0.0, le=1.0, description="Leave out worse ones."
    )
    limit: int = Field(default=MAX_RETRIEVE, ge=1, le=MAX_RETRIEVE, description="How many.")


async def _recall_procedure(context: ToolContext, args: RecallProcedureInput) -> ToolResult:
    answer = await _asked(
        context,
        lambda: context.memory.procedures(
            args.agent_id,
            args.context,
            min_success_rate=args.min_success_rate,
            top_k=args.limit,
        ),
    )
    lines = ["=== PROCEDURES ==="] + [
        f"- {p.name}: success rate {p.success_rate:.2f} over {p.usage_count} uses; {p.description}"
        for p in answer.procedures
    ]
    return ToolResult(answer, "\n".join(lines) if answer.procedures else "No known procedure.")


class LookupPlanInput(_ToolInput):
    agent_id: AgentId = Field(description=_AGENT, examples=["H001"])
    prompt: Query = Field(description="The request you are about to plan for.")


async def _lookup_plan(context: ToolContext, args: LookupPlanInput) -> ToolResult:
    answer = await _asked(context, lambda: context.memory.lookup_plan(args.agent_id, args.prompt))
    if not answer.hit or answer.plan is None:
        return ToolResult(answer, "No cached plan for this request: plan it yourself.")
    steps = [
        f"{i}. {a.tool}({a.input}) -> {a.observation}" for i, a in enumerate(answer.plan.actions, 1)
    ]
    text = (
        f"Cached plan (similarity {answer.similarity:.2f}, score {answer.score:.2f}) for "
        f"{answer.plan.prompt!r}:\n" + "\n".join(steps) + "\nGive feedback on decision "
        f"{answer.plan.decision_event_id} once you know how it went."
    )
    return ToolResult(answer, text)


class SelectToolInput(_ToolInput):
    agent_id: AgentId = Field(description=_AGENT, examples=["H001"])
    prompt: Query = Field(description="The request you need a tool for.")
    exclude: tuple[Skill, ...] = Field(
        default=(),
        max_length=MAX_EXCLUDED_TOOLS,
        description="Tools not to choose: those you downvoted for this request.",
    )


NEW_TOOL_ADVICE = (
    "Define a new tool for it: decide with a new skill, named for what the request needs, "
    "the decision's content describing what the tool does; give feedback on that decision "
    "once you know how it went."
)
"""What a miss tells the model: in seed 002 the agent creates a tool when none fits, and here
a decision with a skill no procedure has yet is what creates one."""


def _choice_text(answer: ToolChoice) -> str:
    if answer.selected is not None:
        tool = answer.selected
        return (
            f"Use the tool {tool.name} (similarity {answer.similarity:.2f} to your request; "
            f"success rate {tool.success_rate:.2f} over {tool.usage_count} uses): "
            f"{tool.description}\nDecide with skill {tool.name!r}, giving the request as the "
            "decision's prompt, and give feedback on that decision: an upvote attaches the "
            "prompt to the tool, so such requests find it again; after a downvote, call "
            f"select_tool again with exclude=[{tool.name!r}]."
        )
    if answer.closest is not None:
        why = (
            f"the closest, {answer.closest.name}, is {answer.similarity:.2f} similar, "
            f"below {answer.threshold:g}"
        )
    elif answer.reason == "all_excluded":
        why = "you excluded every tool you have"
    else:
        why = "you have no tools yet"
    return f"No known tool fits this request ({why}). {NEW_TOOL_ADVICE}"


async def _select_tool(context: ToolContext, args: SelectToolInput) -> ToolResult:
    answer = await _asked(
        context,
        lambda: context.memory.select_tool(args.agent_id, args.prompt, exclude=args.exclude),
    )
    return ToolResult(answer, _choice_text(answer))


class GiveFeedbackInput(_ToolInput):
    agent_id: AgentId = Field(description="Your agent id.", examples=["H001"])
    target_event_id: EventId = Field(
        description="The decision (or observation) the feedback is about: its event id."
    )
    signal: float = Field(
        ge=-1.0, le=1.0, description="How it went: above 0 a success, below 0 a failure."
    )
    content: str | None = Field(default=None, max_length=4096, description="Why, in words.")
    agent_type: str = Field(default="default", min_length=1, max_length=64)


class GivenFeedback(BaseModel):
    event_id: str
    position: RecordPosition


async def _give_feedback(context: ToolContext, args: GiveFeedbackInput) -> ToolResult:
    if context.publish is None:
        raise ToolError("publishing is not available here: no event log is configured")
    try:
        feedback = Feedback(**args.model_dump(exclude_none=True))
    except ValidationError as exc:
        raise ToolError(f"invalid feedback:\n{_problems(exc)}") from None
    landed = await context.publish(feedback)
    position = RecordPosition(topic=landed.topic, partition=landed.partition, offset=landed.offset)
    text = (
        f"Recorded feedback {feedback.signal:+.2f} on {feedback.target_event_id}. To read what "
        f"it changed, pass after={json.dumps([position.model_dump()])} to a retrieval."
    )
    return ToolResult(GivenFeedback(event_id=feedback.event_id, position=position), text)


LEARNED_TOOLS: tuple[MemoryTool[BaseModel], ...] = (
    MemoryTool(
        name="recall_fact",
        title="Recall fact",
        description="Search your semantic memory: facts about the world as you last learned "
        "them (a later fact on the same subject and attribute replaces the earlier one), each "
        "with how many earlier searches returned it. Read-only.",
        input_model=RecallFactInput,
        output_model=Facts,
        run=_recall_fact,  # type: ignore[arg-type]
    ),
    MemoryTool(
        name="recall_procedure",
        title="Recall procedure",
        description="Your skills that fit the situation, with how often they succeeded "
        "(learned from feedback on your decisions), most successful first. Read-only.",
        input_model=RecallProcedureInput,
        output_model=Procedures,
        run=_recall_procedure,  # type: ignore[arg-type]
    ),
    MemoryTool(
        name="lookup_plan",
        title="Look up a cached plan",
        description="Before planning a request, check whether a plan that worked for the same "
        "request is cached: replay its steps on a hit. Read-only.",
        input_model=LookupPlanInput,
        output_model=PlanLookup,
        run=_lookup_plan,  # type: ignore[arg-type]
    ),
    MemoryTool(
        name="select_tool",
        title="Select a tool",
        description="Before acting on a request, choose which of your tools (skills) to use: "
        "the one most similar to the request, by its description and the requests it was "
        "upvoted for, or a miss when none fits, telling you to define a new tool. Read-only.",
        input_model=SelectToolInput,
        output_model=ToolChoice,
        run=_select_tool,  # type: ignore[arg-type]
    ),
    MemoryTool(
        name="give_feedback",
        title="Give feedback",
        description="Say how a decision (or a plan you replayed) turned out: success rates "
        "and cached plans learn from it.",
        input_model=GiveFeedbackInput,
        output_model=GivenFeedback,
        run=_give_feedback,  # type: ignore[arg-type]
        read_only=False,
    ),
)

__all__ = ["LEARNED_TOOLS", "GivenFeedback", "PublishedObservation"]
