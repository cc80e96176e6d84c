"""Reading what an agent learned: procedures for a context, facts for a query, a cached plan
for a request. The agent's learned fields (:mod:`projections.learned.redis_fields`) are read in
one call and ranked here, with the query embedded by the deployment's embedder.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

import numpy as np
import orjson
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from processors.embedding import Embedder, keywords
from processors.plan_cache import CachedPlan, best_plan, cosine
from processors.tool_selection import (
    TOOL_SIMILARITY_THRESHOLD,
    SelectionReason,
    ToolCandidate,
    select_tool,
    similarity,
)
from schemas.agent_events import PlanAction
from schemas.memory_events import decode_vector

PROCEDURE_SIMILARITY = TOOL_SIMILARITY_THRESHOLD
"""Seed 002's threshold for "a known skill": a procedure is relevant to a context at or above
this cosine similarity to its description or to a text an upvote attached to it (or when a
word of its name is in the context, seed 000's own match), and is selected as the tool for a
prompt at or above it."""

DEFAULT_MIN_SUCCESS_RATE = 0.6
"""Seed 000's ``get_procedures(context, min_success_rate=0.6)``."""


class LearnedFieldSource(Protocol):
    async def learned_fields(self, agent_id: str, match: bytes = ...) -> dict[bytes, bytes]: ...


class Procedure(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    success_rate: float
    usage_count: int
    description: str
    score: float | None = Field(
        description="Relevance to the context: the highest cosine similarity to the "
        "description or an attached text (None without a context)."
    )
    name_words: tuple[str, ...] = Field(
        default=(),
        description="Words of the procedure's name found in the context (seed 000's match; "
        "a procedure they name is relevant whatever its score).",
    )
    attached_texts: tuple[str, ...] = Field(description="Texts of upvoted decisions.")
    updated_at: AwareDatetime


class Procedures(BaseModel):
    procedures: tuple[Procedure, ...]


MAX_EXCLUDED_TOOLS = 256
"""Tools one selection may exclude: a retry excludes those downvoted for its prompt, a few;
the bound keeps a request from making the service compare a list without end."""


class ToolChoice(BaseModel):
    """Seed 002's tool selection for a prompt: the procedure to use, or a miss (then the
    agent defines a new tool: a decision with a new skill)."""

    reason: SelectionReason = Field(
        description="selected: a procedure is at least `threshold` similar; below_threshold: "
        "the closest is not; no_tools: the agent has no procedure; all_excluded: every one it "
        "has was excluded."
    )
    selected: Procedure | None = Field(
        description="The procedure to use (its `score` is the similarity), when selected."
    )
    closest: Procedure | None = Field(
        description="The most similar procedure not excluded, on a miss below the threshold."
    )
    similarity: float | None = Field(
        description="The selected or closest procedure's similarity: the highest cosine to "
        "its description or an upvoted decision's text (None when none was compared)."
    )
    threshold: float = Field(description="The similarity a procedure needed to be selected.")


class Fact(BaseModel):
    model_config = ConfigDict(frozen=True)

    fact_id: str
    subject: str
    attribute: str
    value: str
    confidence: float = Field(
        default=1.0, description="How certain the agent is of it (1.0 unless stated)."
    )
    valid_from: AwareDatetime
    valid_to: AwareDatetime | None = Field(description="None while the fact is current.")
    superseded_by: str | None = None
    current: bool
    source_event_ids: tuple[str, ...]
    origin: Literal["stated", "derived"] = Field(
        default="stated",
        description="stated by an observation, or derived at year-end consolidation from an "
        "observation kind the agent kept seeing (its sources are those observations).",
    )
    score: float | None = Field(description="Cosine similarity to the query (None without).")
    access_count: int = Field(
        default=0,
        ge=0,
        description="How many searches (reads with a query) returned the fact while it was "
        "current, as the processors had counted when this was read (seed 000's "
        "access_count); 0 for a fact no search returned.",
    )


class Facts(BaseModel):
    facts: tuple[Fact, ...]


class CachedPlanView(BaseModel):
    model_config = ConfigDict(frozen=True)

    plan_id: str
    prompt: str
    actions: tuple[PlanAction, ...]
    skill: str | None
    decision_event_id: str
    score: float
    cached_at: AwareDatetime


class PlanLookup(BaseModel):
    hit: bool
    plan: CachedPlanView | None = Field(description="The plan to replay, on a hit.")
    similarity: float | None = Field(
        description="The hit's similarity; on a miss, the closest plan's (None if none)."
    )
    score: float | None = Field(description="The hit's score; on a miss, the closest plan's.")
    similarity_threshold: float | None = Field(description="tau of the plan compared.")
    score_threshold: float | None = Field(description="epsilon of the plan compared.")


PROCEDURES = b"#l:p:*"
FACTS = b"#l:f:*"
PLANS = b"#l:[cs]:*"
"""The fields of each kind (:mod:`projections.learned.redis_fields`), as Redis globs."""


def _time(text: str) -> datetime:
    """A stored ISO time (with its offset) as a time to compare."""
    return datetime.fromisoformat(text)


def _grouped(fields: dict[bytes, bytes]) -> dict[str, dict[str, Any]]:
    """Values by field name (without ``#l:``), decoded."""
    return {k[3:].decode(): orjson.loads(v) for k, v in fields.items()}


@dataclass(frozen=True)
class _StoredProcedure:
    """A procedure's fields (:mod:`projections.learned.redis_fields`): recalling procedures
    and selecting a tool read them alike, so both see the same embeddings."""

    summary: dict[str, Any]
    described: dict[str, Any]
    texts: tuple[dict[str, Any], ...]

    @property
    def name(self) -> str:
        return str(self.summary["name"])

    def candidate(self) -> ToolCandidate:
        """Decoded only when asked: a recall without a context compares nothing."""
        vectors = [decode_vector(t["embedding"]) for t in self.texts]
        if "embedding" in self.described:
            vectors.append(decode_vector(self.described["embedding"]))
        return ToolCandidate(self.name, self.summary["success_rate"], tuple(vectors))

    def view(self, score: float | None, name_words: tuple[str, ...] = ()) -> Procedure:
        return Procedure(
            name=self.name,
            success_rate=self.summary["success_rate"],
            usage_count=self.summary["usage_count"],
            description=self.described.get("description", ""),
            score=score,
            name_words=name_words,
            attached_texts=tuple(t["text"] for t in self.texts),
            updated_at=self.summary["updated_at"],
        )


def _stored_procedures(values: dict[str, dict[str, Any]]) -> Iterator[_StoredProcedure]:
    """Every procedure of the agent, with its description and the attached texts it has
    (a slot past ``attached_count``, or not yet written, is none)."""
    for key, summary in values.items():
        if not key.startswith("p:") or key.count(":") != 1:
            continue
        texts = tuple(
            values[f"{key}:t:{slot}"]
            for slot in range(summary["attached_count"])
            if f"{key}:t:{slot}" in values
        )
        yield _StoredProcedure(summary, values.get(f"{key}:d", {}), texts)


class LearnedMemory:
    """Reads over the agent's learned fields. ``source`` gives the store of the projection
    version being served (it may change), ``embedder`` embeds queries as the worker did."""

    def __init__(self, source: Callable[[], LearnedFieldSource], embedder: Embedder) -> None:
        self._source = source
        self._embedder = embedder
        self._embed_in_thread = not embedder.id.startswith("hashing")

    async def _embed(self, text: str) -> np.ndarray:
        if self._embed_in_thread:
            return await asyncio.to_thread(self._embedder.embed, text)
        return self._embedder.embed(text)

    async def _fields(self, agent_id: str, match: bytes) -> dict[str, dict[str, Any]]:
        """The learned fields ``match`` (a Redis glob) names, alone: an agent's superseded facts
        stay, with their embeddings, and reading and decoding every one of them for each tool
        selection made it cost O(the agent's fact history)."""
        return _grouped(await self._source().learned_fields(agent_id, match))

    async def procedures(
        self,
        agent_id: str,
        context: str | None = None,
        *,
        min_success_rate: float = DEFAULT_MIN_SUCCESS_RATE,
        top_k: int = 5,
        min_similarity: float = PROCEDURE_SIMILARITY,
    ) -> Procedures:
        """Procedures at or above ``min_success_rate``, relevant to ``context`` if given,
        best first: by success rate as seed 000 sorts them, then by relevance. Relevant is
        seed 000's rule, a word of the name in the context ("buy_insurance" for "should I buy
        flood insurance?"; stopwords aside), or the embedding's, ``min_similarity`` to the
        description or an upvoted decision's text (which finds paraphrases the name lacks)."""
        values = await self._fields(agent_id, PROCEDURES)
        query = None if context is None else await self._embed(context)
        context_words = set() if context is None else set(keywords(context))
        found: list[Procedure] = []
        for stored in _stored_procedures(values):
            if stored.summary["success_rate"] < min_success_rate:
                continue
            score = None
            named: tuple[str, ...] = ()
            if query is not None:
                score = similarity(query, stored.candidate())
                named = tuple(w for w in dict.fromkeys(keywords(stored.name)) if w in context_words)
                if score < min_similarity and not named:
                    continue
            found.append(stored.view(score, named))
        found.sort(key=lambda p: (-p.success_rate, -(p.score or 0.0), p.name))
        return Procedures(procedures=tuple(found[:top_k]))

    async def select_tool(
        self,
        agent_id: str,
        prompt: str,
        *,
        exclude: Collection[str] = (),
        min_similarity: float = PROCEDURE_SIMILARITY,
    ) -> ToolChoice:
        """Seed 002's choice of a tool for ``prompt`` among the agent's procedures, whatever
        their success rate (a skill just created, at 0.5, must be usable), the ones named in
        ``exclude`` (downvoted for this prompt) left out: the most similar one if at least
        ``min_similarity``, else a miss naming the closest
        (:func:`processors.tool_selection.select_tool`)."""
        values = await self._fields(agent_id, PROCEDURES)
        query = await self._embed(prompt)
        stored = {p.name: p for p in _stored_procedures(values)}
        choice = select_tool(
            query,
            (p.candidate() for p in stored.values()),
            threshold=min_similarity,
            exclude=frozenset(exclude),
        )
        best = choice.best
        view = None if best is None else stored[best.name].view(best.similarity)
        return ToolChoice(
            reason=choice.reason,
            selected=view if choice.reason == "selected" else None,
            closest=view if choice.reason == "below_threshold" else None,
            similarity=None if best is None else best.similarity,
            threshold=min_similarity,
        )

    async def facts(
        self,
        agent_id: str,
        query: str | None = None,
        *,
        top_k: int = 5,
        history: bool = False,
        min_confidence: float = 0.0,
    ) -> Facts:
        """Current facts (all of them, superseded too, with ``history``) at least as certain
        as ``min_confidence``, most relevant to ``query`` first, else latest first. A fact is
        current when nothing superseded it and it is the latest of its subject and attribute
        (a less certain restatement still supersedes: it is what the agent now holds)."""
        values = await self._fields(agent_id, FACTS)
        stated = {k[2:]: v for k, v in values.items() if k.startswith("f:") and k.count(":") == 1}
        # The latest of each subject and attribute among the facts nothing replaced: which
        # replaces which is the order the worker read them in, whatever times they carry (a
        # backdated restatement still replaces). Times only choose among facts the worker's
        # bounded tracking left unended; compared as times, not as text in their offsets.
        latest: dict[tuple[str, str], tuple[datetime, str]] = {}
        for fact_id, fact in stated.items():
            if values.get(f"f:{fact_id}:to"):
                continue
            pair, mark = (fact["subject"], fact["attribute"]), (_time(fact["valid_from"]), fact_id)
            if pair not in latest or mark > latest[pair]:
                latest[pair] = mark
        vector = None if query is None else await self._embed(query)
        found: list[Fact] = []
        for fact_id, fact in stated.items():
            ended = values.get(f"f:{fact_id}:to", {})
            current = not ended and latest[(fact["subject"], fact["attribute"])][1] == fact_id
            confidence = fact.get("confidence", 1.0)
            if not (current or history) or confidence < min_confidence:
                continue
            score = None
            if vector is not None:
                score = cosine(vector, decode_vector(fact["embedding"]))
            found.append(
                Fact(
                    fact_id=fact_id,
                    subject=fact["subject"],
                    attribute=fact["attribute"],
                    value=fact["value"],
                    confidence=confidence,
                    valid_from=fact["valid_from"],
                    valid_to=ended.get("valid_to"),
                    superseded_by=ended.get("superseded_by"),
                    current=current,
                    source_event_ids=tuple(fact["source_event_ids"]),
                    origin=fact.get("origin", "stated"),
                    score=score,
                    access_count=values.get(f"f:{fact_id}:n", {}).get("access_count", 0),
                )
            )
        found.sort(key=lambda f: (-(f.score or 0.0), -f.valid_from.timestamp(), f.fact_id))
        return Facts(facts=tuple(found[:top_k]))

    async def lookup_plan(self, agent_id: str, prompt: str) -> PlanLookup:
        """The cached plan to replay for ``prompt`` (seed 002), or a miss with the closest."""
        values = await self._fields(agent_id, PLANS)
        query = await self._embed(prompt)
        plans: dict[str, dict[str, Any]] = {}
        candidates: list[CachedPlan] = []
        for key, plan in values.items():
            scored = values.get(f"s:{key[2:]}")
            if not key.startswith("c:") or scored is None:
                continue
            plans[plan["plan_id"]] = {**plan, "score": scored["score"]}
            candidates.append(
                CachedPlan(
                    plan["plan_id"],
                    decode_vector(plan["prompt_embedding"]),
                    scored["score"],
                    scored["similarity_threshold"],
                    scored["score_threshold"],
                )
            )
        hit = best_plan(query, candidates)
        if hit is None:
            closest = max(candidates, key=lambda c: cosine(query, c.vector), default=None)
            return PlanLookup(
                hit=False,
                plan=None,
                similarity=None if closest is None else cosine(query, closest.vector),
                score=None if closest is None else closest.score,
                similarity_threshold=None if closest is None else closest.similarity_threshold,
                score_threshold=None if closest is None else closest.score_threshold,
            )
        chosen, similarity = hit
        return PlanLookup(
            hit=True,
            plan=CachedPlanView.model_validate(plans[chosen.plan_id]),
            similarity=similarity,
            score=chosen.score,
            similarity_threshold=chosen.similarity_threshold,
            score_threshold=chosen.score_threshold,
        )
