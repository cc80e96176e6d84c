"""The HTTP routes of what agents learned: procedures, facts, the plan cache, and the choice
of a procedure as the tool for a prompt.

Mounted by :func:`projections.service.app.create_app` when given a
:class:`~projections.learned.reads.LearnedMemory`; without one they answer 503. A facts read
with a query is seed 000's ``search``: it is recorded on ``memory.access`` by the recorder the
retrieval route uses, and the worker counts it on every fact it returned (``access_count``).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Path, Query
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from projections.learned.reads import (
    DEFAULT_MIN_SUCCESS_RATE,
    MAX_EXCLUDED_TOOLS,
    PROCEDURE_SIMILARITY,
    Facts,
    LearnedMemory,
    PlanLookup,
    Procedures,
    ToolChoice,
)
from projections.service.access_records import Recorder, facts_read_record
from projections.service.http_auth import Guarded
from schemas.agent_events import Skill
from schemas.envelope import AGENT_ID_RULE, MAX_CONTENT_CHARS, NOT_WHITESPACE, AgentId

MAX_LEARNED_TOP_K = 50

Text = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_CONTENT_CHARS, pattern=NOT_WHITESPACE)
]
"""A prompt, context or query: blank, it compared as nothing and answered as if it did."""
AgentPath = Annotated[AgentId, Path(description=f"The agent: {AGENT_ID_RULE}.", examples=["H001"])]
TopK = Annotated[int, Query(ge=1, le=MAX_LEARNED_TOP_K, description="How many to return.")]


class PlanLookupRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: Text = Field(description="The request to answer: a cached plan for it is a hit.")


class ToolSelectRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: Text = Field(description="The request to choose a tool for.")
    exclude: tuple[Skill, ...] = Field(
        default=(),
        max_length=MAX_EXCLUDED_TOOLS,
        description="Procedures not to choose: those downvoted for this prompt, on a retry. "
        "A name the agent has no procedure of is ignored.",
        examples=[["SetPlayerAttribute"]],
    )
    min_similarity: float = Field(
        default=PROCEDURE_SIMILARITY,
        ge=-1.0,
        le=1.0,
        description="The cosine similarity a procedure needs to be selected (inclusive).",
    )


def _learned(learned: LearnedMemory | None) -> LearnedMemory:
    if learned is None:
        raise HTTPException(503, "learned memory unavailable: this service reads no Redis")
    return learned


def add_learned_routes(
    app: FastAPI, learned: LearnedMemory | None, guard: Guarded, record: Recorder
) -> None:
    """The learned-memory routes, each needing the ``read`` scope for its agent when keys are
    configured (the plan lookup and the tool selection are POSTs for their bodies, but only
    read). ``record`` takes the facts reads with a query."""
    reading: dict[str, Any] = {
        "dependencies": guard.dependencies("read"),
        "responses": guard.responses(),
        "tags": ["learned"],
    }

    @app.get(
        "/v1/agents/{agent_id}/procedures",
        **reading,
        summary="The agent's procedures for a context (seed 000's recall_procedure)",
        description="Procedures (decision skills) at or above `min_success_rate`, relevant to "
        "`context`: a word of the procedure's name in it (seed 000's match, `name_words`), or "
        "a cosine similarity to the description or an upvoted decision's text at or above "
        f"`min_similarity` ({PROCEDURE_SIMILARITY} by default); by success rate, then "
        "relevance.",
    )
    async def procedures(
        agent_id: AgentPath,
        context: Annotated[Text | None, Query(description="The situation at hand.")] = None,
        min_success_rate: Annotated[float, Query(ge=0.0, le=1.0)] = DEFAULT_MIN_SUCCESS_RATE,
        min_similarity: Annotated[float, Query(ge=-1.0, le=1.0)] = PROCEDURE_SIMILARITY,
        top_k: TopK = 5,
    ) -> Procedures:
        return await _learned(learned).procedures(
            agent_id,
            context,
            min_success_rate=min_success_rate,
            top_k=top_k,
            min_similarity=min_similarity,
        )

    @app.get(
        "/v1/agents/{agent_id}/facts",
        **reading,
        summary="The agent's facts (seed 000's recall_fact)",
        description="Current facts, most relevant to `query` first (latest first without "
        "one); with `history`, superseded facts too, each with its validity; with "
        "`min_confidence`, only facts at least that certain. A read with a `query` is a "
        "search: it is recorded on `memory.access`, and each current fact it returned counts "
        "it in its `access_count` once the processors have read the record.",
    )
    async def facts(
        agent_id: AgentPath,
        query: Annotated[Text | None, Query(description="What to recall.")] = None,
        top_k: TopK = 5,
        history: Annotated[bool, Query(description="Include superseded facts.")] = False,
        min_confidence: Annotated[
            float, Query(ge=0.0, le=1.0, description="Leave out facts less certain than this.")
        ] = 0.0,
    ) -> Facts:
        started = time.perf_counter()
        answer = await _learned(learned).facts(
            agent_id, query, top_k=top_k, history=history, min_confidence=min_confidence
        )
        if query is not None:
            took_ms = (time.perf_counter() - started) * 1000.0
            parameters = {
                "query": query,
                "top_k": top_k,
                "history": history,
                "min_confidence": min_confidence,
            }
            await record(agent_id, lambda: facts_read_record(agent_id, parameters, answer, took_ms))
        return answer

    _add_seed_002_routes(app, learned, reading)


def _add_seed_002_routes(
    app: FastAPI, learned: LearnedMemory | None, reading: dict[str, Any]
) -> None:
    """The plan cache and the tool selection of seed 002."""

    @app.post(
        "/v1/agents/{agent_id}/plans/lookup",
        **reading,
        summary="A cached plan for a request (seed 002's memory cache)",
        description="A hit is the most similar cached plan with similarity >= tau and score >= "
        "epsilon (its agent type's), with both numbers; a miss names the closest plan's.",
    )
    async def lookup_plan(agent_id: AgentPath, request: PlanLookupRequest) -> PlanLookup:
        return await _learned(learned).lookup_plan(agent_id, request.prompt)

    @app.post(
        "/v1/agents/{agent_id}/tools/select",
        **reading,
        summary="The procedure to use as the tool for a prompt (seed 002's tool selection)",
        description="Compares the prompt with each procedure's description and the texts of "
        "its upvoted decisions, whatever its success rate, leaving out those in `exclude`: "
        "the most similar is `selected` if its similarity is at least `min_similarity` "
        f"({PROCEDURE_SIMILARITY} by default); otherwise a miss (`reason` below_threshold, "
        "with the `closest`; no_tools; all_excluded), on which the agent defines a new tool "
        "by deciding with a new skill. Ties go to the higher success rate, then the name.",
    )
    async def select_tool(agent_id: AgentPath, request: ToolSelectRequest) -> ToolChoice:
        return await _learned(learned).select_tool(
            agent_id,
            request.prompt,
            exclude=request.exclude,
            min_similarity=request.min_similarity,
        )
