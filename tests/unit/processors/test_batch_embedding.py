"""Embedding a batch at once gives every text the row it gets alone, whatever the batch; with
an embedder whose calls are dear, the texts the rules make are embedded together too."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from processors import batch as batch_module
from processors.batch import RawRecord, RecordOpener, process_batch
from processors.batch_embedding import Misses, PreparedEmbedder
from processors.embedding import EmbedsMany, HashingEmbedder
from processors.lifecycle import Deriving
from processors.recording import AgentMemoryState
from processors.state_fold import FoldedState
from processors.worker_step import carry, derive_batch
from schemas.agent_events import Decision, Feedback, Observation
from schemas.codec import encode_event
from schemas.derived_fields import Embedding, encode_vector
from schemas.learned_events import ProcedureChanged
from schemas.memory_events import ForgetAgent, MemoryRetrieved, MemorySummarised
from streams.privacy.keyring import FileKeyring
from streams.privacy.sealing import RecordSealer
from tests.agent_streams import (
    CTX,
    FAILED_AT,
    RANK,
    START,
    TOPICS,
    Action,
    action,
    build_stream,
    split,
)

words = st.sampled_from(
    ["flood", "levee", "the", "insurance", "raised", "house", "42", "storm", "a", "é"]
)
sentences = st.lists(words, max_size=12).map(" ".join)


@given(batch=st.lists(sentences, max_size=20), dim=st.sampled_from([8, 64, 384]))
def test_a_batch_row_is_the_text_embedded_alone(batch: list[str], dim: int) -> None:
    embedder = HashingEmbedder(dim)
    matrix = embedder.embed_many(batch)
    assert matrix.shape == (len(batch), dim)
    assert matrix.dtype == np.float32
    for row, text in zip(matrix, batch, strict=True):
        assert np.array_equal(row, embedder.embed(text))


def test_texts_without_keywords_embed_to_zero_rows_beside_others() -> None:
    matrix = HashingEmbedder(16).embed_many(["the a", "flood house", ""])
    assert not matrix[0].any()
    assert not matrix[2].any()
    assert abs(float(np.linalg.norm(matrix[1])) - 1.0) < 1e-6


class CountingEmbedder:
    """A one-text-at-a-time embedder that notes the texts it embeds."""

    def __init__(self, inner: HashingEmbedder | None = None) -> None:
        self.inner = inner or HashingEmbedder(32)
        self.calls: list[str] = []

    @property
    def id(self) -> str:
        return self.inner.id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, text: str) -> np.ndarray:
        self.calls.append(text)
        return self.inner.embed(text)


def test_a_prepared_embedder_answers_the_batch_from_one_call_and_the_rest_as_it_comes() -> None:
    hashing = HashingEmbedder(32)
    assert isinstance(hashing, EmbedsMany)
    prepared = PreparedEmbedder(hashing)
    prepared.prepare(["flood in the street", "levee broke", "flood in the street"])
    assert np.array_equal(prepared.embed("levee broke"), hashing.embed("levee broke"))
    assert np.array_equal(prepared.embed("a summary"), hashing.embed("a summary"))
    assert (prepared.id, prepared.dim) == (hashing.id, hashing.dim)

    counting = CountingEmbedder()
    assert not isinstance(counting, EmbedsMany)
    one_by_one = PreparedEmbedder(counting)
    one_by_one.prepare(["x storm", "x storm", "y house"])
    assert counting.calls == ["x storm", "y house"]  # each text once
    one_by_one.embed("x storm")
    assert counting.calls == ["x storm", "y house"]
    one_by_one.prepare(["z levee"])  # the batch before is dropped
    one_by_one.embed("x storm")
    assert counting.calls == ["x storm", "y house", "z levee", "x storm"]


class DearEmbedder(CountingEmbedder):
    """The hashing embedder posing as a model, whose calls are dear (``batches_misses``):
    it counts its batched calls, and ``calls`` are the texts it embedded alone."""

    batches_misses = True

    def __init__(self) -> None:
        assert isinstance(CTX.embedder, HashingEmbedder)
        super().__init__(CTX.embedder)
        self.batched_calls = 0

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        self.batched_calls += 1
        return self.inner.embed_many(texts)


def _derived(records: list[RawRecord], ctx: Deriving, opener: RecordOpener | None = None) -> Any:
    result = process_batch(
        records, lambda _: AgentMemoryState(), ctx=ctx, failed_at=FAILED_AT, opener=opener
    )
    return result.derived, result.dead_letters, result.states, result.forgotten_records


@settings(max_examples=60, deadline=None)
@given(
    actions=st.lists(action, min_size=30, max_size=120),
    cuts=st.lists(st.integers(1, 150), max_size=8),
)
def test_a_dear_embedder_embeds_what_the_rules_make_in_one_more_call(
    actions: list[Action], cuts: list[int]
) -> None:
    """Summaries and promoted copies are embedded together after a first pass found them:
    batch after batch, from the state carried between them, the worker derives what a plain
    embedder derives, and no text is embedded alone."""
    records, _ = build_stream(actions)
    batches = split(records, cuts)
    dear = DearEmbedder()
    assert _carried(batches, replace(CTX, embedder=dear)) == _carried(batches, CTX)
    assert dear.calls == []
    assert dear.batched_calls <= 2 * len(batches)


def _carried(batches: list[list[RawRecord]], ctx: Deriving) -> Any:
    folded, partition_of = FoldedState(TOPICS.schedule), dict[str, int]()
    derived: list[Any] = []
    for records in batches:
        batch = derive_batch(records, folded, partition_of, ctx=ctx, rank=RANK, failed_at=FAILED_AT)
        derived += batch.result.derived
        carry(folded, partition_of, batch)
    return derived, folded.states


class SealedAgent:
    """H001's records sealed with its key, and the opener of a fresh worker for them."""

    def __init__(self, keyring: FileKeyring) -> None:
        self.keyring = keyring
        self.publisher = RecordSealer(keyring)

    async def forgetting(self, event_id: str) -> RawRecord:
        """A request that forgets every key H001 has, on the schedule topic."""
        await self.publisher.prepare_seal(["H001"])
        key_ids = tuple(await self.keyring.key_ids("H001"))
        request = ForgetAgent(
            event_id=event_id, agent_id="H001", requested_at=START, key_ids=key_ids
        )
        return RawRecord(TOPICS.schedule, 0, 0, b"H001", encode_event(request), kind="tick")

    def sealed(self, offset: int, event: Observation | MemoryRetrieved) -> RawRecord:
        value = self.publisher.seal("H001", encode_event(event))
        if isinstance(event, MemoryRetrieved):
            return RawRecord(TOPICS.access, 0, offset, b"H001", value, kind="retrieval")
        return RawRecord(TOPICS.observations, 0, offset, b"H001", value, "observation")

    async def derived_both_ways(self, records: list[RawRecord]) -> tuple[Any, Any, DearEmbedder]:
        """What a plain embedder and a dear one derive, each with a fresh worker's opener."""
        results = []
        dear = DearEmbedder()
        for ctx in (CTX, replace(CTX, embedder=dear)):
            opener = RecordSealer(self.keyring)
            await opener.prepare_open(r.value for r in records if r.value is not None)
            results.append(_derived(records, ctx, opener))
        return results[0], results[1], dear


def observation(content: str, year: int | None = None) -> Observation:
    return Observation(
        agent_id="H001", content=content, importance=0.65, occurred_at=START, year=year
    )


async def test_the_first_pass_of_a_dear_embedder_forgets_no_keys(tmp_path: Path) -> None:
    """A retrieval sealed with an agent's key, before the request that forgets it in the same
    batch, still opens in the pass that counts."""
    agent = SealedAgent(FileKeyring(tmp_path))
    forget = await agent.forgetting("req-1")
    retrieval = MemoryRetrieved(
        agent_id="H001",
        event_id="r-1",
        occurred_at=START,
        mode="two_phase",
        parameters={"top_k": 3},
        results=(),
        took_ms=1.0,
    )
    records = [
        agent.sealed(0, observation("water in the cellar", year=1)),
        agent.sealed(1, observation("water in the garden", year=1)),
        agent.sealed(0, retrieval),
        # The year ends: a summary, which the first pass finds.
        agent.sealed(2, observation("the levee held", year=2)),
        forget,
    ]
    plain, dear_result, dear = await agent.derived_both_ways(records)
    assert any(isinstance(e, MemorySummarised) for e in plain[0])
    assert dear_result == plain
    assert dear.batched_calls == 2
    assert dear.calls == []


async def test_a_batch_that_forgets_an_agent_is_derived_again_with_its_keys_forgotten(
    tmp_path: Path,
) -> None:
    """No text for a second call, but the first pass kept the keys: what the forgotten key
    sealed after the request must still be skipped, as a single pass skips it."""
    agent = SealedAgent(FileKeyring(tmp_path))
    forget = await agent.forgetting("req-2")
    records = [
        agent.sealed(0, observation("before")),
        forget,
        agent.sealed(1, observation("after, old key")),
    ]
    plain, dear_result, dear = await agent.derived_both_ways(records)
    assert plain[3] == 1  # the record after the request is forgotten
    assert dear_result == plain
    assert dear.calls == []


class PassCounter:
    """Counts the derivations of a batch (:func:`processors.batch._derive`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.passes = 0
        derive = batch_module._derive

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.passes += 1
            return derive(*args, **kwargs)

        monkeypatch.setattr(batch_module, "_derive", counted)


def _year_records() -> list[RawRecord]:
    """H001 observes in year 1 and year 2: the year's end makes a summary, a text of the rules."""
    records = [
        RawRecord(TOPICS.observations, 0, n, b"H001", encode_event(event), "observation")
        for n, event in enumerate(
            [
                observation("water in the cellar", year=1),
                observation("water in the garden", year=1),
                observation("the levee held", year=2),
            ]
        )
    ]
    return records


def test_a_dear_embedder_derives_a_batch_once_and_fills_in_the_rows_of_what_the_rules_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records = _year_records()
    plain = _derived(records, CTX)
    summaries = [e for e in plain[0] if isinstance(e, MemorySummarised)]
    assert summaries
    counter = PassCounter(monkeypatch)
    dear = DearEmbedder()
    assert _derived(records, replace(CTX, embedder=dear)) == plain
    assert counter.passes == 1
    assert dear.batched_calls == 2
    assert dear.calls == []


def test_a_placeholder_inside_an_event_is_filled_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """An upvoted decision's text, cut to 280 characters (so no text the batch embedded), is
    attached to its procedure with its embedding inside the event: filled there, in one
    pass, and the agent's own text that reads like a placeholder is left as it is."""
    who: dict[str, Any] = {"agent_id": "H001", "agent_type": "household", "occurred_at": START}
    long_text = "Elevate the house on stilts " * 20
    decision = Decision(**who, event_id="d-1", skill="elevate", content=long_text)
    upvote = Feedback(**who, event_id="f-1", target_event_id="d-1", signal=1.0)
    placeholder = Misses(CTX.embedder.dim).placeholder("any")
    posing = observation(encode_vector(placeholder))
    records = [
        RawRecord(TOPICS.decisions, 0, 0, b"H001", encode_event(decision), "decision"),
        RawRecord(TOPICS.feedback, 0, 0, b"H001", encode_event(upvote), "feedback"),
        RawRecord(TOPICS.observations, 0, 0, b"H001", encode_event(posing), "observation"),
    ]
    plain = _derived(records, CTX)
    assert any(isinstance(e, ProcedureChanged) and e.attached for e in plain[0])
    counter = PassCounter(monkeypatch)
    assert _derived(records, replace(CTX, embedder=DearEmbedder())) == plain
    assert counter.passes == 1


def test_a_placeholder_not_found_whole_in_an_event_derives_the_batch_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rule that kept a row elsewhere than in an event's field, or used it twice, would
    leave a placeholder where no filling reaches: ``filled`` says so and the batch is
    derived again with every row prepared."""
    records = _year_records()
    plain = _derived(records, CTX)
    counter = PassCounter(monkeypatch)
    handed = Misses.placeholder

    def handed_twice(self: Misses, text: str) -> np.ndarray:
        handed(self, text)
        return handed(self, text)

    monkeypatch.setattr(Misses, "placeholder", handed_twice)
    dear = DearEmbedder()
    assert _derived(records, replace(CTX, embedder=dear)) == plain
    assert counter.passes == 2
    assert dear.batched_calls == 2


def test_filled_puts_each_text_s_row_in_its_placeholders_places() -> None:
    hashing = HashingEmbedder(16)
    prepared = PreparedEmbedder(hashing)
    prepared.prepare(["flood in the street"])
    with prepared.noting_misses() as misses:
        first = prepared.embed("a summary of the year")
        again = prepared.embed("a summary of the year")
        other = prepared.embed("levee broke")
        known = prepared.embed("flood in the street")
    assert list(misses) == ["a summary of the year", "levee broke"]
    assert misses.handed == {"a summary of the year": 2, "levee broke": 1}
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)
    assert encode_vector(first) != encode_vector(np.zeros(16))  # a text without keywords
    assert np.array_equal(known, hashing.embed("flood in the street"))
    prepared.add(misses)
    summary = encode_vector(hashing.embed("a summary of the year"))
    levee = encode_vector(hashing.embed("levee broke"))
    # An agent's text that reads like a placeholder is no embedding: it stays as it is.
    posing = encode_vector(other)
    placed = encode_vector(again)
    events: list[BaseModel] = [
        Recorded(content=posing, embedding=encode_vector(first)),
        Recorded(content="x", embedding=encode_vector(known), attached=Attached(embedding=posing)),
        Listing(items=(Attached(embedding=encode_vector(known)), Attached(embedding=placed))),
    ]
    filled = prepared.filled(events, misses)
    assert filled == [
        Recorded(content=posing, embedding=summary),
        Recorded(content="x", embedding=encode_vector(known), attached=Attached(embedding=levee)),
        Listing(items=(Attached(embedding=encode_vector(known)), Attached(embedding=summary))),
    ]
    assert filled[1] is not events[1]  # a copy: the events given are immutable
    assert events[1] == Recorded(
        content="x", embedding=encode_vector(known), attached=Attached(embedding=posing)
    )
    # Each text's placeholders are counted on their own: one found twice does not make up
    # for another not found.
    twice = [events[0], events[0], Recorded(content="z", embedding=encode_vector(first))]
    assert prepared.filled(twice, misses) is None
    assert prepared.filled(events[:2], misses) is None  # the summary's second is not there


class Attached(BaseModel):
    model_config = ConfigDict(frozen=True)
    embedding: Embedding


class Recorded(BaseModel):
    model_config = ConfigDict(frozen=True)
    content: str
    embedding: Embedding
    attached: Attached | None = None


class Listing(BaseModel):
    model_config = ConfigDict(frozen=True)
    items: tuple[Attached, ...]
