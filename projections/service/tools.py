"""Memory as tools an LLM agent calls: what each tool is, as data, apart from any protocol.

A :class:`MemoryTool` is a name, a description written for a model, a pydantic input model (its
JSON Schema is what the model fills in), an output model, and ``run``, which maps the input onto
the query service or the log. Every tool answers twice: the structured output, and a text a
model reads directly (:func:`projections.service.client.format_for_prompt`). The MCP server
(:mod:`projections.service.mcp_server`) serves a :class:`ToolRegistry`; another protocol (an
OpenAI function list, say) would serve the same one.

The tools (:func:`memory_tools`):

* ``retrieve_memory``: the retrieval skill of seed 004 (sections 3.3 and 8), read-only, every
  mode of :class:`RetrievalRequest`.
* ``recall_similar_experience``: seed 000's search of experiences by a query
  (``EpisodicMemory.search``, the ``recall_memory_node``), over every memory of an event the
  agent lived, working or episodic.
* ``publish_observation``: records what the agent observed; returns the log position a following
  retrieval passes as ``after`` to see it (read your writes).

* ``recall_fact``, ``recall_procedure``, ``lookup_plan``, ``select_tool`` and
  ``give_feedback``: what the agent learned from feedback
  (:mod:`projections.service.learned_tools`).

A further recall tool is one more entry: ``registry.register(recall_tool("recall_known",
kinds=("fact",), ...))`` searches memories of those kinds by meaning.

Tools never raise anything but :class:`ToolError` for what the caller can act on (bad
arguments, a refused or timed-out request, a service or broker out of reach); its message is
written for the model that made the call.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Protocol, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)

from projections.episodic.candidates import Scope
from projections.retrieval.breakdowns import ProfileName
from projections.retrieval.filters import MemoryFilter, MemoryKind
from projections.retrieval.generative import GenerativeWeights
from projections.retrieval.models import (
    DEFAULT_WAIT_TIMEOUT_MS,
    MAX_AFTER_POSITIONS,
    MAX_CONTEXT_TAGS,
    MAX_RECENT_DAYS,
    MAX_WAIT_TIMEOUT_MS,
    Mode,
    RecordPosition,
    RetrievalRequest,
    RetrievalResponse,
)
from projections.retrieval.scoring import Weights
from projections.service.client import (
    AsyncEngramClient,
    HasPosition,
    InvalidServiceURLError,
    NotInLogError,
    QueryError,
    ServiceTimeoutError,
    ServiceUnreachableError,
    UnreadableAnswerError,
    WaitTimeoutError,
    format_for_prompt,
)
from schemas.agent_events import AgentEvent, Content, JsonObject, Observation
from schemas.envelope import MAX_CONTENT_CHARS, AgentId, SimulationTime, Tag, TimeAsked
from schemas.errors import EngramError
from schemas.readable_errors import readable_reason

__all__ = [
    "MAX_RETRIEVE",
    "MemoryTool",
    "ObservationSink",
    "PublishObservationInput",
    "PublishedObservation",
    "RecallInput",
    "RetrieveMemoryInput",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "memory_tools",
    "recall_tool",
]

MAX_RETRIEVE = 5
"""The most memories a tool call asks for: ``institutional_constraints.max_retrieve: 5`` of the
``retrieve_memory`` skill (seed 004, section 8.1), whose output goes into the model's context;
the HTTP API, for programs, allows up to ``MAX_TOP_K``. Modes ``basic`` and ``constrained``
return the count seed 003 gives them whatever ``top_k`` says (5 recent + 2 important; a
cognitive profile's count by arousal): that count is the point of those models, so the tool
does not cut it. Mode ``recent``'s 10 (seed 000's ``limit``) is a default, not the point of
the mode, so the tool asks for ``top_k`` there as everywhere else."""

RECALL_LIMIT = 3
"""Experiences the recall node of seed 000 asks for (``episodic_memory.search(..., limit=3)``)."""

RECALL_MIN_IMPORTANCE = 0.3
"""``EpisodicMemory.search``'s ``min_importance`` default (seed 000)."""

Query = Annotated[str, StringConstraints(min_length=1, max_length=MAX_CONTENT_CHARS)]


class ToolError(EngramError):
    """A failed call, in words for the model that made it: what went wrong and, where it can
    say, what to change."""


class ObservationSink(Protocol):
    """Puts an agent event (an observation, feedback) on the log and says where it landed
    (``AsyncPublisher.publish``).

    Raises :class:`ToolError` when the log cannot take it."""

    async def __call__(self, observation: AgentEvent, /) -> HasPosition: ...


@dataclass(frozen=True)
class ToolContext:
    """What the tools reach: the query service, and the log (None: a read-only deployment)."""

    memory: AsyncEngramClient
    publish: ObservationSink | None = None


@dataclass(frozen=True)
class ToolResult:
    structured: BaseModel
    """Matches the tool's ``output_model``."""
    text: str
    """What a model reads."""


InputT = TypeVar("InputT", bound=BaseModel)


@dataclass(frozen=True)
class MemoryTool(Generic[InputT]):
    name: str
    title: str
    description: str
    """For the model: when to call the tool and what it returns."""
    input_model: type[InputT]
    output_model: type[BaseModel]
    run: Callable[[ToolContext, InputT], Awaitable[ToolResult]]
    read_only: bool = True

    def input_schema(self) -> dict[str, Any]:
        return self.input_model.model_json_schema()

    def output_schema(self) -> dict[str, Any]:
        return self.output_model.model_json_schema(mode="serialization")

    async def call(self, context: ToolContext, arguments: Mapping[str, Any] | None) -> ToolResult:
        """Validates ``arguments`` against the input model, then runs the tool."""
        try:
            parsed = self.input_model.model_validate(dict(arguments or {}))
        except ValidationError as exc:
            raise ToolError(f"invalid arguments for {self.name}:\n{_problems(exc)}") from None
        return await self.run(context, parsed)


class ToolRegistry:
    """The tools one server offers, in the order it lists them; names are unique."""

    def __init__(self, tools: Iterable[MemoryTool[Any]] = ()) -> None:
        self._tools: dict[str, MemoryTool[Any]] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: MemoryTool[Any]) -> MemoryTool[Any]:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is registered already")
        self._tools[tool.name] = tool
        return tool

    def get(self, name: str) -> MemoryTool[Any] | None:
        return self._tools.get(name)

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def __iter__(self) -> Iterator[MemoryTool[Any]]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)


class _ToolInput(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


_AGENT = "Your agent id: whose memories these are."
_AFTER = (
    "Read your writes: positions publish_observation returned. The call waits (bounded) until "
    "memory has taken them in, so what you just recorded can be found."
)


class RetrieveMemoryInput(_ToolInput):
    agent_id: AgentId = Field(description=_AGENT, examples=["H001"])
    query: Query | None = Field(
        default=None,
        description="The situation or question at hand, in words. The relevance and generative "
        "modes rank by how well memories match it (meaning and shared words); the other modes "
        "rank by time and importance (weighted can add keyword relevance).",
    )
    top_k: int = Field(
        default=MAX_RETRIEVE,
        ge=1,
        le=MAX_RETRIEVE,
        description=f"How many memories to return (at most {MAX_RETRIEVE}).",
    )
    mode: Mode | None = Field(
        default=None,
        description="How memories are ranked; omitted: two_phase, or relevance over all your "
        "memories when `query` is given. two_phase: recent working memories first, then "
        "important long-term ones fading by 0.95 a year. weighted: recency, importance and "
        "the context `tags` together. saliency: importance fading with age. basic: the 5 "
        "most recent plus the 2 most important. constrained: as basic, as many as `profile` "
        "and your arousal allow. generative: recency, importance and relevance to `query`. "
        "relevance: relevance to `query` alone. recent: what happened in the last `days`, "
        "newest first. basic and constrained decide how many themselves.",
    )
    scope: Scope | None = Field(
        default=None,
        description="Which memories: active (what you currently hold; the default), archive "
        "(what capacity and forgetting took away, still searchable), or all (the default "
        "with a `query` and no `mode`).",
    )
    profile: ProfileName | None = Field(
        default=None,
        description="Mode constrained only: the cognitive-constraint profile "
        "(MILLER_STANDARD when omitted).",
    )
    current_year: SimulationTime | None = Field(
        default=None, description="The current simulation year: ages are counted in years."
    )
    current_step: SimulationTime | None = Field(
        default=None,
        ge=0,
        description="The current simulation step, instead of a year: ages are counted in steps.",
    )
    current_time: TimeAsked | None = Field(
        default=None,
        description="The current time (ISO 8601 with an offset), instead of a year or step: "
        "ages are counted in hours of when things happened. Mode recent counts its days back "
        "from it (now when omitted).",
    )
    days: float | None = Field(
        default=None,
        gt=0.0,
        le=MAX_RECENT_DAYS,
        description="Mode recent only: how many days back to look (7 when omitted; 0.5 is "
        "12 hours).",
    )
    tags: tuple[Tag, ...] = Field(
        default=(),
        max_length=MAX_CONTEXT_TAGS,
        description="Tags of the current situation (e.g. flood): memories carrying one rank "
        "higher in weighted mode.",
    )
    filter: MemoryFilter | None = Field(
        default=None,
        description="Only memories meeting every condition are ranked, in any mode: tags (any "
        "of), kinds (working, episodic, summary_l1, summary_l2), min_importance, "
        "year_from/year_to, step_from/step_to, occurred_after/occurred_before (ISO 8601 "
        "times of the events).",
        examples=[{"kinds": ["episodic"], "min_importance": 0.5, "year_from": 3}],
    )
    weights: Weights | None = Field(
        default=None,
        description="Mode weighted only: the weights of recency, importance, context, "
        "keyword relevance to `query` and interference (0.3/0.5/0.2/0/0 when omitted; "
        "relevance 0.5 when `query` is given).",
    )
    generative: GenerativeWeights | None = Field(
        default=None,
        description="Mode generative only: the weights of recency, importance and relevance.",
    )
    arousal: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Mode constrained only: how aroused you are, 0 calm to 1 alarmed (more "
        "memories when aroused); your own stored arousal when omitted.",
    )
    after: tuple[RecordPosition, ...] = Field(
        default=(), max_length=MAX_AFTER_POSITIONS, description=_AFTER
    )
    wait_timeout_ms: int = Field(
        default=DEFAULT_WAIT_TIMEOUT_MS,
        ge=0,
        le=MAX_WAIT_TIMEOUT_MS,
        description="The longest wait for `after`, in milliseconds.",
    )


class RecallInput(_ToolInput):
    agent_id: AgentId = Field(description=_AGENT, examples=["H001"])
    query: Query = Field(description="What to recall: the situation at hand, in words.")
    limit: int = Field(
        default=RECALL_LIMIT,
        ge=1,
        le=MAX_RETRIEVE,
        description=f"How many to return (at most {MAX_RETRIEVE}).",
    )
    min_importance: float = Field(
        default=RECALL_MIN_IMPORTANCE,
        ge=0.0,
        le=1.0,
        description="Leave out what mattered less than this (0 to 1).",
    )
    after: tuple[RecordPosition, ...] = Field(
        default=(), max_length=MAX_AFTER_POSITIONS, description=_AFTER
    )
    wait_timeout_ms: int = Field(
        default=DEFAULT_WAIT_TIMEOUT_MS,
        ge=0,
        le=MAX_WAIT_TIMEOUT_MS,
        description="The longest wait for `after`, in milliseconds.",
    )


class PublishObservationInput(_ToolInput):
    agent_id: AgentId = Field(description="Your agent id: who observed it.", examples=["H001"])
    content: Content = Field(
        description="What you observed, as one self-contained sentence (it is what you will "
        "recall later).",
        examples=["Year 3: A major flood caused $60,000 in damages"],
    )
    agent_type: Annotated[str, StringConstraints(min_length=1, max_length=64)] = Field(
        default="default",
        description="Your agent type, which decides how important each kind of event is "
        "and how much stays in active memory; a chat assistant remembering a conversation "
        "uses 'assistant'.",
    )
    year: SimulationTime | None = Field(
        default=None, description="The simulation year it happened in."
    )
    step: SimulationTime | None = Field(
        default=None, ge=0, description="The simulation step it happened at."
    )
    kind: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = Field(
        default=None,
        description="The event type, a key of your agent type's importance table (e.g. "
        "flood.major).",
    )
    source: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = Field(
        default=None,
        description="How you learned it: personal, neighbor, community or abstract.",
    )
    tags: tuple[Tag, ...] = Field(default=(), max_length=64, description="Topic tags.")
    importance: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="How much it matters, 0 to 1, if you know better than the defaults; 0.7 or "
        "more is kept in long-term memory.",
    )
    metadata: JsonObject = Field(default_factory=dict, description="Any further JSON fields.")


class PublishedObservation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str = Field(description="The observation's id.")
    position: RecordPosition = Field(
        description="Where it landed in the log: pass it in `after` to a retrieval to see it."
    )


async def retrieve(
    context: ToolContext, agent_id: str, request: RetrievalRequest
) -> RetrievalResponse:
    """The service's answer, its refusals turned into :class:`ToolError`s for the model."""
    try:
        return await context.memory.retrieve(agent_id, request)
    except WaitTimeoutError as exc:
        pending = ", ".join(f"{p.topic}:{p.partition}:{p.offset}" for p in exc.pending)
        raise ToolError(
            f"memory has not taken in {pending} yet (waited {exc.waited_ms:.0f} ms); "
            "call again shortly, or with a longer wait_timeout_ms"
        ) from None
    except NotInLogError as exc:
        missing = ", ".join(f"{p.topic}:{p.partition}:{p.offset}" for p in exc.missing)
        raise ToolError(
            f"memory's log holds nothing at {missing}: pass in after only the positions "
            "publish_observation returned"
        ) from None
    except QueryError as exc:
        if exc.status == 422:
            raise ToolError(f"the memory service refused the request: {exc.message}") from None
        if exc.status == 503:
            raise ToolError(f"memory is unavailable right now: {exc.message}") from None
        raise ToolError(f"the memory service failed ({exc.status}): {exc.message}") from None
    except ServiceTimeoutError:
        raise ToolError(
            f"the memory service{_at(context)} did not answer in time; call again"
        ) from None
    except ServiceUnreachableError as exc:
        raise ToolError(f"cannot reach the memory service{_at(context)}: {exc.reason}") from None
    except UnreadableAnswerError as exc:
        raise ToolError(f"the memory service{_at(context)} answered unreadably: {exc}") from None
    except InvalidServiceURLError as exc:  # a configuration no retry changes
        raise ToolError(f"the memory service cannot be called: {exc}") from None


def _at(context: ToolContext) -> str:
    return f" at {context.memory.base_url}" if context.memory.base_url else ""


def _request(**fields: Any) -> RetrievalRequest:
    try:
        return RetrievalRequest.model_validate(fields)
    except ValidationError as exc:
        raise ToolError(f"invalid retrieval:\n{_problems(exc)}") from None


async def _retrieve_memory(context: ToolContext, args: RetrieveMemoryInput) -> ToolResult:
    fields = args.model_dump(exclude={"agent_id"}, exclude_none=True)
    if args.weights is not None:  # the model, which knows the weights the caller left out
        fields["weights"] = args.weights
    request = _request(**fields)
    response = await retrieve(context, args.agent_id, request)
    return ToolResult(response, format_for_prompt(response, with_time=True))


RETRIEVE_MEMORY: MemoryTool[RetrieveMemoryInput] = MemoryTool(
    name="retrieve_memory",
    title="Retrieve memory",
    description=(
        "Retrieve relevant past experiences for decision making: your most relevant memories, "
        "best first, each with the year or step it happened, where it was kept (working or "
        "long-term memory) and why it ranked where it did. Call it before deciding. Read-only."
    ),
    input_model=RetrieveMemoryInput,
    output_model=RetrievalResponse,
    run=_retrieve_memory,
)


def recall_tool(
    name: str,
    *,
    title: str,
    description: str,
    kinds: tuple[MemoryKind, ...],
    header: str,
    input_model: type[RecallInput] = RecallInput,
    scope: Scope | None = None,
) -> MemoryTool[RecallInput]:
    """A tool that searches memories of ``kinds`` by meaning (mode ``relevance``, over
    ``scope``: the mode's default when None), keeping those at least ``min_importance``
    important: seed 000's ``search(query, limit, min_importance)`` of each memory layer."""

    async def run(context: ToolContext, args: RecallInput) -> ToolResult:
        request = _request(
            mode="relevance",
            query=args.query,
            top_k=args.limit,
            **({} if scope is None else {"scope": scope}),
            filter={"kinds": kinds, "min_importance": args.min_importance},
            after=args.after,
            wait_timeout_ms=args.wait_timeout_ms,
        )
        response = await retrieve(context, args.agent_id, request)
        return ToolResult(response, format_for_prompt(response, header=header, with_time=True))

    return MemoryTool(
        name=name,
        title=title,
        description=description,
        input_model=input_model,
        output_model=RetrievalResponse,
        run=run,
    )


RECALL_SIMILAR_EXPERIENCE = recall_tool(
    "recall_similar_experience",
    title="Recall similar experience",
    description=(
        "Search your memory of past experiences for ones like the situation you describe in "
        "`query`, most similar first. Use it when something familiar happens, to learn from "
        "what happened then. Read-only."
    ),
    # Seed 000's episodic memory keeps every experience and its search keeps those of
    # importance 0.3 and above; here the ones below ENGRAM_EPISODIC_THRESHOLD (0.7) live in
    # working memory, and capacity pushes older ones out: both stores, every memory lived.
    kinds=("working", "episodic"),
    scope="all",
    header="=== SIMILAR EXPERIENCES ===",
)


async def _publish_observation(context: ToolContext, args: PublishObservationInput) -> ToolResult:
    if context.publish is None:
        raise ToolError(
            "publishing is not available here: this memory server has no event log configured"
        )
    try:
        observation = Observation(**args.model_dump(exclude_none=True))
    except ValidationError as exc:
        raise ToolError(f"invalid observation:\n{_problems(exc)}") from None
    landed = await context.publish(observation)
    position = RecordPosition(topic=landed.topic, partition=landed.partition, offset=landed.offset)
    after = json.dumps([position.model_dump()])
    text = (
        f"Recorded observation {observation.event_id} at "
        f"{position.topic}:{position.partition}:{position.offset}. To see it in a retrieval, "
        f"pass after={after}."
    )
    return ToolResult(PublishedObservation(event_id=observation.event_id, position=position), text)


PUBLISH_OBSERVATION: MemoryTool[PublishObservationInput] = MemoryTool(
    name="publish_observation",
    title="Publish observation",
    description=(
        "Record something you observed (an event, a neighbour's action, a message) in your "
        "memory. It is scored for importance and kept in working or long-term memory. Returns "
        "where it was recorded: pass that position as `after` to retrieve_memory or "
        "recall_similar_experience to see it at once."
    ),
    input_model=PublishObservationInput,
    output_model=PublishedObservation,
    run=_publish_observation,
    read_only=False,
)


def memory_tools() -> ToolRegistry:
    """A fresh registry of the memory tools; register more on it before serving it."""
    from projections.service.learned_tools import LEARNED_TOOLS  # it builds on this module

    return ToolRegistry(
        [RETRIEVE_MEMORY, RECALL_SIMILAR_EXPERIENCE, PUBLISH_OBSERVATION, *LEARNED_TOOLS]
    )


def _problems(exc: ValidationError) -> str:
    """One line per problem, naming the field, without the echoed input or pydantic's URLs."""
    lines = []
    for error in exc.errors(include_url=False, include_input=False):
        field = ".".join(str(part) for part in error["loc"]) or "(arguments)"
        lines.append(f"  {field}: {readable_reason(error)}")
    return "\n".join(lines)
