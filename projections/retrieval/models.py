"""What a retrieval request asks for and what it returns: the HTTP and MCP contract."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from projections.episodic.candidates import Scope
from projections.memory import StoredMemory
from projections.retrieval.breakdowns import Breakdown, ProfileName
from projections.retrieval.filters import MemoryFilter
from projections.retrieval.generative import GenerativeWeights
from projections.retrieval.scoring import QUERY_RELEVANCE_WEIGHT, Clock, Weights
from schemas.envelope import MAX_CONTENT_CHARS, NOT_WHITESPACE, TIME_BOUND, AgentId, Tag, TimeAsked
from schemas.memory_events import Level

Mode = Literal[
    "two_phase",
    "weighted",
    "saliency",
    "basic",
    "constrained",
    "generative",
    "relevance",
    "recent",
]

MODE_HELP = (
    "``two_phase``: working memories first, then episodic ones by 0.95^age x importance "
    "(seed 004). ``weighted``: S = Wr*R + Wi*I + Wc*C + Wrel*Rel - Wint*Int (seed 003). "
    "``saliency``: v1, I x e^(-0.1 age) (seed 003). ``basic``: the 5 most recent memories plus "
    "the 2 highest by I x e^(-0.1 age) (seed 003, WRR-validated). ``constrained``: basic "
    "ranking whose recent window is sized by a cognitive-constraint ``profile`` and the "
    "agent's arousal (seed 003, 5.1). ``generative``: recency + importance + relevance, each "
    "min-max normalised (Generative Agents, Park et al. 2023). ``relevance``: relevance to "
    "``query`` alone. ``recent``: the memories of events within the last ``days`` (7) before "
    "``current_time`` (now), newest first, ``top_k`` 10 unless given (seed 000's "
    "``get_recent_episodes``). ``basic`` and ``constrained`` return the count their "
    "configuration decides; ``top_k`` does not apply to them."
)

DEFAULT_RECENT_DAYS = 7.0
DEFAULT_RECENT_TOP_K = 10
"""Seed 000's ``get_recent_episodes(days=7, limit=10)``."""

MAX_RECENT_DAYS = 3_652_059.0
"""The span of the calendar a ``datetime`` holds (years 1 to 9999): a longer window reaches no
further back, so a larger value is refused as a likely mistake."""

MAX_TOP_K = 100
"""Above what both stores hold together (10 + 50, seed 004 section 5.1) with headroom for larger
capacities; a prompt never wants more, so a larger value is refused as a likely mistake."""

MAX_CONTEXT_TAGS = 64

MAX_AFTER_POSITIONS = 100
"""Positions one retrieval may wait for; each costs a read of both stores per poll."""

DEFAULT_WAIT_TIMEOUT_MS = 5_000
MAX_WAIT_TIMEOUT_MS = 30_000
"""A wait longer than this is a stalled pipeline to report, not a request to keep open."""

TopicName = Annotated[
    str, StringConstraints(min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$")
]
"""What Kafka accepts as a topic name."""


class RecordPosition(BaseModel):
    """Where a published record landed in the log, as publishing returns it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: TopicName = Field(examples=["agent.observations"])
    partition: int = Field(ge=0, le=2**31 - 1)
    offset: int = Field(ge=0, le=2**53)
    """At most 2^53, which a double (a JSON parser's number, Redis's Lua) holds exactly."""


class AsOfPosition(BaseModel):
    """A point of the log given as a position: on a topic the processors consume (where a
    record was published) or on the derived log they write (``memory.items``,
    ``memory.lifecycle``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: TopicName = Field(examples=["agent.observations"])
    partition: int = Field(ge=0, le=2**31 - 1)
    offset: int = Field(ge=0, le=2**53)


AS_OF_HELP = (
    "Answer from the memory as it stood at this point of the log, rebuilt from the agent's "
    "partition of the derived log (it costs a read of that partition; the answer is not "
    "recorded on memory.access). A time (with its offset): every batch the processors had "
    "logged by then, a batch counting from the log time of its 'logged up to' marker. A "
    "position on a topic the processors consume (what publishing returned): the memory once "
    "that record was derived. A position on memory.items or memory.lifecycle: the memory once "
    "the batch that logged that record counted. A time in the future, or a position the log "
    "does not hold or the processors have not derived yet, answers 409. Not with after."
)


class PendingPosition(RecordPosition):
    """A position a store had not applied when the wait ended, and how far each store was."""

    working: int | None = Field(description="Working memory's applied offset (None: nothing).")
    episodic: int | None = Field(description="Episodic memory's applied offset (None: nothing).")


class WaitTimedOut(BaseModel):
    """The body of a 504: which positions were not applied in time."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    detail: str
    pending: tuple[PendingPosition, ...]
    waited_ms: float = Field(ge=0.0)


class MissingPosition(RecordPosition):
    """A position the log does not hold, and where its partition ends."""

    log_end: int | None = Field(
        description="The offset the partition's next record will get (None: no such partition)."
    )


class NotInLog(BaseModel):
    """The body of a 409: positions of ``after`` the log does not hold, so no wait would see
    them applied."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    detail: str
    missing: tuple[MissingPosition, ...]


def _some_distinct(levels: tuple[Level, ...]) -> tuple[Level, ...]:
    """Checked after the items rather than with ``min_length``, which pydantic also reports
    when an item was refused, so a bad level came back as two errors."""
    if not levels:
        raise ValueError("levels must name at least one level")
    if len(set(levels)) != len(levels):
        raise ValueError("levels must not repeat a level")
    return levels


MODE_ONLY: dict[str, Mode] = {
    "weights": "weighted",
    "profile": "constrained",
    "arousal": "constrained",
    "generative": "generative",
    "days": "recent",
}
"""Fields that configure one mode. Given with another mode they would be silently ignored, so
such a request is refused; the request's JSON Schema states the same rule
(:func:`cross_field_rules`), so a request valid by the OpenAPI document is never refused."""


def _mode_is(mode: Mode) -> dict[str, Any]:
    return {"required": ["mode"], "properties": {"mode": {"const": mode}}}


def cross_field_rules(schema: dict[str, Any]) -> None:
    """Adds to the request's JSON Schema the rules :meth:`RetrievalRequest._consistent` checks
    across fields: time on one axis, each mode's own fields with that mode only, a query for
    mode relevance, no simulation time for mode recent, and ``as_of`` without ``after``. A
    mode left out is ``two_phase``, which has no fields of its own."""
    given = {
        "current_year": {"type": "integer"},
        "current_step": {"type": "integer"},
        "current_time": {"type": "string"},
    }
    one_axis = [
        {"not": {"required": list(pair), "properties": {name: given[name] for name in pair}}}
        for pair in (
            ("current_year", "current_step"),
            ("current_year", "current_time"),
            ("current_step", "current_time"),
        )
    ]
    modes = dict.fromkeys(MODE_ONLY.values())
    own_fields = [
        {
            "if": _mode_is(mode),
            "else": {
                "properties": {
                    name: {"type": "null"} for name, owner in MODE_ONLY.items() if owner == mode
                }
            },
        }
        for mode in modes
    ]
    query_given = {
        "if": _mode_is("relevance"),
        "then": {"required": ["query"], "properties": {"query": {"type": "string"}}},
    }
    wall_clock_only = {
        "if": _mode_is("recent"),
        "then": {
            "properties": {"current_year": {"type": "null"}, "current_step": {"type": "null"}}
        },
    }
    as_of_without_after = {
        "not": {
            "required": ["as_of", "after"],
            "properties": {"as_of": {"not": {"type": "null"}}, "after": {"minItems": 1}},
        }
    }
    schema["allOf"] = [*one_axis, *own_fields, query_given, wall_clock_only, as_of_without_after]


class RetrievalRequest(BaseModel):
    """One retrieval for one agent. Time is given on at most one axis; see
    :func:`projections.retrieval.scoring.resolve_clock` for what happens when it is omitted."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", allow_inf_nan=False, json_schema_extra=cross_field_rules
    )

    query: (
        Annotated[
            str,
            StringConstraints(min_length=1, max_length=MAX_CONTENT_CHARS, pattern=NOT_WHITESPACE),
        ]
        | None
    ) = Field(
        default=None,
        description=(
            "Text of the current situation, not blank (a blank one compared as nothing and "
            "ranked every memory 0). Episodic memories are then searched by embedding (the "
            "result carries ``similarity``), and weighted mode scores keyword overlap (Rel) "
            "against it."
        ),
    )
    top_k: int = Field(
        default=5,
        ge=1,
        le=MAX_TOP_K,
        description=(
            "How many memories to return (10 in mode recent unless given); not used by modes "
            "basic and constrained, whose configuration decides the count."
        ),
    )
    mode: Mode = Field(
        default="two_phase",
        description=MODE_HELP + " Left out with a ``query``, the mode is ``relevance``.",
    )
    scope: Scope = Field(
        default="active",
        description=(
            "Which memories are ranked: ``active``, what capacity and forgetting left (the "
            "seeds' memory); ``archive``, what they took away, kept until the agent is erased; "
            "``all``, both. Left out with a ``query`` and no ``mode``, ``all``."
        ),
    )
    current_year: int | None = Field(
        default=None,
        ge=-TIME_BOUND,
        le=TIME_BOUND,
        description="Simulation year of the retrieval; ages are then in years.",
    )
    current_step: int | None = Field(
        default=None,
        ge=0,
        le=TIME_BOUND,
        description="Simulation step of the retrieval; ages are then in steps.",
    )
    current_time: TimeAsked | None = Field(
        default=None,
        description=(
            "Wall-clock time of the retrieval (ISO 8601 with an offset), for agents that count "
            "no years or steps; ages are then in hours of the events' occurred_at. Mode recent "
            "counts its days back from it; left out there, the service's clock at the request "
            "(written into the recorded request, so the retrieval replays the same)."
        ),
    )
    days: float | None = Field(
        default=None,
        gt=0.0,
        le=MAX_RECENT_DAYS,
        description=(
            "Recent mode only: how many days before ``current_time`` a memory's event may have "
            "occurred (the window leaves out the instant exactly that far back, as seed 000's "
            "``created_at > now - days``); 7 when omitted. A fraction counts too: 0.5 is 12 "
            "hours."
        ),
    )
    tags: tuple[Tag, ...] = Field(
        default=(),
        max_length=MAX_CONTEXT_TAGS,
        description="Context tags of the current situation (C in weighted mode, with the "
        "query's keywords; case-insensitive).",
    )
    weights: Weights | None = Field(
        default=None, description="Weighted mode only: overrides of the seed 003 default weights."
    )
    profile: ProfileName | None = Field(
        default=None,
        description=(
            "Constrained mode only: the cognitive-constraint profile (system 1 / system 2 / "
            "working capacity: MILLER_STANDARD 5/7/10, COWAN_CONSERVATIVE 3/5/7, "
            "EXTENDED_CONTEXT 7/9/15, MINIMAL 3/4/5); MILLER_STANDARD when omitted."
        ),
    )
    arousal: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description=(
            "Constrained mode only: the arousal to size the recent window by, instead of the "
            "agent's stored arousal."
        ),
    )
    generative: GenerativeWeights | None = Field(
        default=None,
        description="Generative mode only: weights of recency, importance, relevance and decay.",
    )
    filter: MemoryFilter | None = Field(
        default=None,
        description=(
            "Any mode: only memories meeting every condition are ranked (tags, kinds, minimum "
            "importance, year and step ranges). Kinds, when given, decide which levels are "
            "read instead of ``levels``."
        ),
    )
    levels: Annotated[tuple[Level, ...], AfterValidator(_some_distinct)] = Field(
        default=(0,),
        json_schema_extra={"minItems": 1, "uniqueItems": True},
        description=(
            "Which memories to rank: 0 memories of events, 1 L1 session summaries, 2 L2 chapter "
            "summaries; summaries are asked for explicitly."
        ),
    )

    after: tuple[RecordPosition, ...] = Field(
        default=(),
        max_length=MAX_AFTER_POSITIONS,
        description=(
            "Read your writes: positions returned by publishing. The retrieval waits until both "
            "memory stores have applied every one of them, at most ``wait_timeout_ms``; past "
            "that it answers 504 and names the positions still pending. A position the log "
            "does not hold (at or past the end of its partition, or on no partition) is "
            "answered 409 at once."
        ),
    )
    wait_timeout_ms: int = Field(
        default=DEFAULT_WAIT_TIMEOUT_MS,
        ge=0,
        le=MAX_WAIT_TIMEOUT_MS,
        description="Longest wait for ``after``, in milliseconds (0: check once, do not wait).",
    )
    as_of: AsOfPosition | TimeAsked | None = Field(default=None, description=AS_OF_HELP)

    @model_validator(mode="before")
    @classmethod
    def _query_without_mode(cls, data: Any) -> Any:
        """A query with no mode asks what the agent remembers about it: every memory it has
        lived, by relevance. Filled in here, so a recorded request names what was ranked."""
        if isinstance(data, dict) and data.get("query") is not None and "mode" not in data:
            return {**data, "mode": "relevance", "scope": data.get("scope", "all")}
        return data

    @model_validator(mode="before")
    @classmethod
    def _recent_defaults(cls, data: Any) -> Any:
        """Mode recent's own defaults (seed 000's 7 days and 10 episodes), filled in here rather
        than left to the ranking, so a recorded request names the window and count it ran with
        whatever the defaults become."""
        if isinstance(data, dict) and data.get("mode") == "recent":
            filled = {**data}
            if filled.get("days") is None:
                filled["days"] = DEFAULT_RECENT_DAYS
            if "top_k" not in filled:
                filled["top_k"] = DEFAULT_RECENT_TOP_K
            return filled
        return data

    @model_validator(mode="before")
    @classmethod
    def _query_relevance_weight(cls, data: Any) -> Any:
        """A weighted request with a query and no relevance weight ranks by the query too
        (:data:`QUERY_RELEVANCE_WEIGHT`). Filled in here, where the request is read: the client,
        the MCP tool and ``engram retrieve --weight`` send every weight, so a default decided at
        ranking time read their unset relevance as a 0 given, and the recorded request (which
        ``engram recall --again`` reruns) named 0 where the answer had used 0.5."""
        if not (isinstance(data, dict) and data.get("mode") == "weighted" and data.get("query")):
            return data
        weights = data.get("weights")
        if weights is None:
            weights = {}
        elif isinstance(weights, Weights):
            if "relevance" in weights.model_fields_set:
                return data
            weights = weights.model_dump(include=weights.model_fields_set)
        if not isinstance(weights, dict) or "relevance" in weights:
            return data
        return {**data, "weights": {**weights, "relevance": QUERY_RELEVANCE_WEIGHT}}

    @model_validator(mode="after")
    def _consistent(self) -> RetrievalRequest:
        if self.current_year is not None and self.current_step is not None:
            raise ValueError(
                "give current_year or current_step, not both: ages are measured on one axis"
            )
        if self.current_time is not None and (
            self.current_year is not None or self.current_step is not None
        ):
            raise ValueError(
                "give current_time or a current year or step, not both: ages are measured on "
                "one axis"
            )
        for name, mode in MODE_ONLY.items():
            if getattr(self, name) is not None and self.mode != mode:
                verb = "apply" if name == "weights" else "applies"
                raise ValueError(f"{name} {verb} only to mode '{mode}'")
        if self.mode == "relevance" and self.query is None:
            raise ValueError("mode 'relevance' ranks by relevance to query: give a query")
        if self.mode == "recent" and (
            self.current_year is not None or self.current_step is not None
        ):
            raise ValueError(
                "mode 'recent' counts days of the wall clock back from current_time: give "
                "current_time (or nothing: now), not a current year or step"
            )
        if self.as_of is not None and self.after:
            raise ValueError(
                "after waits for the stores of now; as_of rebuilds the memory from the log: "
                "give one of them"
            )
        return self

    def pinned(self, now: datetime) -> RetrievalRequest:
        """This request with the moment its answer depends on fixed: mode recent without a
        ``current_time`` gets ``now``. The service pins a request before it answers and
        records it, so ``engram recall --again`` runs the same window, not one ending at the
        time of the rerun."""
        if self.mode == "recent" and self.current_time is None:
            return self.model_copy(update={"current_time": now})
        return self


class RetrievedMemory(StoredMemory):
    """A stored memory with its rank, score and why it got that score."""

    rank: int = Field(ge=1, description="1 for the best memory.")
    store: Literal["working", "episodic"] = Field(description="The store it was read from.")
    score: float = Field(description="The ranking score; see ``breakdown`` for its parts.")
    breakdown: Annotated[Breakdown, Field(discriminator="mode")]


class RetrievalResponse(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_id: AgentId
    mode: Mode
    scope: Scope = Field(default="active", description="Which memories were ranked.")
    clock: Clock = Field(description="The time axis and the moment ages were measured from.")
    weights: Weights | None = Field(default=None, description="The weights used, in weighted mode.")
    generative: GenerativeWeights | None = Field(
        default=None, description="The weights used, in generative mode."
    )
    working_count: int = Field(ge=0, description="Working memories considered.")
    episodic_count: int = Field(ge=0, description="Episodic memories considered.")
    results: tuple[RetrievedMemory, ...]
    took_ms: float = Field(
        ge=0.0, description="Time spent reading and ranking, the wait for ``after`` excluded."
    )
    waited_ms: float = Field(
        default=0.0, ge=0.0, description="Time spent waiting for the positions of ``after``."
    )
