"""Generated agent streams and a model of the worker's loop, for the replay and idempotence
properties (``tests/unit/processors/test_replay_properties.py`` and
``tests/integration/projections/test_projection_properties.py``).

A stream is the raw records one worker consumes, in the order they were made (and stamped, so
that a batch's canonical order is that order): observations and decisions of simulation agents
(``S*``: steps and years, so sessions, years and chapters end) and wall-clock agents (``W*``:
ticks end their sessions), ticks on ``memory.schedule``, retrievals and searches of facts on
``memory.access``, the odd undecodable record and the odd event id used again. Importance is
mixed on purpose: explicit values around every threshold, event-table entries, and emotion x
source scores.

:class:`Worker` drives the worker's own pure step (:mod:`processors.worker_step`, which
:meth:`streams.worker.pipeline.IngestPipeline.handle` runs between its I/O) with a derived log
held in memory: the first marker of a partition where the log has none, then per batch skip
what the log says was derived and derive from the carried state
(:func:`processors.worker_step.derive_batch`), write the derived events in emission order, each
to its source's partition of ``memory.items`` or ``memory.lifecycle``, then the batch's markers
(:meth:`processors.worker_step.DerivedBatch.markers`) to ``memory.lifecycle``, and move the
carried state on (:func:`processors.worker_step.carry`). :meth:`Worker.take_over` is
:func:`streams.eventlog.derived_log.recover_state`: it folds the state back from that log,
leaving out batches whose marker is missing.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import orjson
from hypothesis import strategies as st

from processors.batch import PlainRecords, RawRecord, RecordKind, process_batch
from processors.batch_markers import Logged, logged_batches, opening_markers
from processors.batch_order import topic_rank
from processors.config import LifecycleRules, PruningRules, SummaryRules, load_processing_config
from processors.embedding import HashingEmbedder
from processors.emission_order import causal_order
from processors.lifecycle import Deriving
from processors.recording import AgentMemoryState
from processors.state_fold import FoldedState
from processors.summarising import ExtractiveSummariser
from processors.worker_step import DerivedBatch, carry, derive_batch
from projections.learned.redis_fields import learned_writes
from schemas.agent_events import Decision, FactStatement, Feedback, Observation
from schemas.codec import decode_retrieval, encode_event
from schemas.learned_events import FactStated, LearnedChange
from schemas.memory_events import (
    FACTS_READ_MODE,
    AgentForgotten,
    DerivedEvent,
    DerivedRecord,
    ForgetAgent,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemoryRetrieved,
    MemorySummarised,
    RetrievedItem,
    ScheduleTick,
    SourcePosition,
)
from schemas.topics import Topics

CONFIG = load_processing_config(
    working_capacity=4,
    episodic_capacity=5,
    episodic_threshold=0.8,
    lifecycle=LifecycleRules(
        summaries=SummaryRules(l1_min_memories=2, chapter_length=3, sessions_per_chapter=2),
        pruning=PruningRules(
            l1_min_age=2, l2_min_age=4, l1_min_age_seconds=60, l2_min_age_seconds=120
        ),
    ),
)
"""Small capacities and short periods, so that a few dozen records exercise every rule."""
EMBEDDER = HashingEmbedder()
SUMMARISER = ExtractiveSummariser()
CTX = Deriving(CONFIG, EMBEDDER, SUMMARISER, CONFIG.version(EMBEDDER.id, SUMMARISER.id))
TOPICS = Topics()
RANK = topic_rank(TOPICS)
START = datetime(2026, 1, 1, tzinfo=UTC)
FAILED_AT = START

PARTITION_OF = {"S1": 0, "W1": 0, "Y1": 1, "W2": 1}
"""``S*`` carry steps (and years, a year being 4 steps), ``Y*`` years only, ``W*`` neither."""
AGENTS = tuple(PARTITION_OF)
SIMULATED = ("S1", "Y1")
IMPORTANCES = (None, 0.3, 0.62, 0.65, 0.68, 0.75, 0.85, 0.95)
"""Around the gate (0.6), the promotion threshold (0.7) and the episodic threshold (0.8);
None is scored from the content (emotion x source) or the event table."""
KINDS = (None, None, None, "flood.major", "flood.minor", "claim.denied")
SKILLS = ("elevate_house", "buy_insurance", "do_nothing", "relocate", "wait_and_see")
SCORES = (-0.2, 0.1, 0.5, 0.9, 1.3)
"""Retrieval scores, clipped to [0, 1] by the relevance of MUS."""
SIGNALS = (-1.0, -0.5, 0.0, 0.5, 1.0)
"""Feedback signals: failures, no outcome, successes."""

Action = tuple[str, str, int]
"""(agent, or partition for a tick; what; a value whose meaning depends on what)."""

_agent = st.sampled_from(AGENTS)
_observe = st.tuples(_agent, st.just("observe"), st.integers(0, len(IMPORTANCES) * len(KINDS) - 1))
_advance = st.tuples(st.sampled_from(SIMULATED), st.just("advance"), st.integers(1, 3))
action: st.SearchStrategy[Action] = st.one_of(
    _observe,
    _observe,
    _observe,
    st.tuples(_agent, st.just("decide"), st.integers(0, 2 * len(SKILLS) - 1)),
    st.tuples(_agent, st.just("feedback"), st.integers(0, 2 * len(SIGNALS) - 1)),
    st.tuples(_agent, st.just("fact"), st.integers(0, 3)),
    _advance,
    _advance,
    st.tuples(_agent, st.just("retrieve"), st.integers(0, len(SCORES) - 1)),
    st.tuples(_agent, st.just("search_facts"), st.integers(0, 3)),
    st.tuples(st.sampled_from(["0", "1"]), st.just("tick"), st.integers(1, 200)),
    st.tuples(_agent, st.just("garbage"), st.just(0)),
    st.tuples(_agent, st.just("forget"), st.just(0)),
    st.tuples(_agent, st.just("reuse"), st.integers(0, 3)),
)
"""Weighted by repetition: mostly recordings and simulated time, so that the rules fire."""


def agent_key_of(value: bytes) -> bytes:
    """The key a publisher gives an agent event's record: its agent id (a sealed record names
    it in the clear too). The processors refuse an agent event keyed otherwise."""
    try:
        return str(orjson.loads(value)["agent_id"]).encode()
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return b"garbage"  # refused for what it is, before its key matters


def split(records: Sequence[RawRecord], cuts: Iterable[int]) -> list[list[RawRecord]]:
    """``records`` cut at the given indexes (out-of-range and repeated cuts are ignored)."""
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(records)}), len(records)]
    return [list(records[a:b]) for a, b in itertools.pairwise(bounds)]


def partition_of(event: DerivedEvent) -> int:
    position = event.source_position
    assert position is not None, "every generated derived event has a source position"
    return position.partition


@dataclass
class Worker:
    """One worker's processing of a stream, and the derived log it writes."""

    folded: FoldedState = field(default_factory=lambda: FoldedState(TOPICS.schedule))
    partition_of: dict[str, int] = field(default_factory=dict)
    applied: list[list[DerivedEvent]] = field(default_factory=list)
    """What the worker applied to its projections, batch by batch (``result.derived``)."""
    log: dict[tuple[str, int], list[DerivedRecord]] = field(default_factory=dict)
    """The derived log, by topic and partition, in the order it was written, markers included."""
    opened: set[int] = field(default_factory=set)
    """Partition numbers this worker has processed (``IngestPipeline._recovered``)."""
    refused: list[str] = field(default_factory=list)
    """The kinds of the dead letters of every batch."""

    def handle(self, records: Sequence[RawRecord]) -> list[DerivedEvent]:
        batch = self.derive(records)
        self.mark(batch, self.write(batch.result.derived))
        return batch.result.derived

    def derive(self, records: Sequence[RawRecord]) -> DerivedBatch:
        """Process a batch without writing its derived events (the caller decides what the
        broker took)."""
        self.open(records)
        batch = derive_batch(
            records, self.folded, self.partition_of, ctx=CTX, rank=RANK, failed_at=FAILED_AT
        )
        self.applied.append(batch.result.derived)
        self.refused.extend(letter.error_kind for letter in batch.result.dead_letters)
        carry(self.folded, self.partition_of, batch)
        return batch

    def open(self, records: Sequence[RawRecord]) -> None:
        """Log a first marker for the batch's partitions where the log has none, as
        ``IngestPipeline._open_to_markers`` does before a worker's first batch there."""
        new = {r.partition for r in records} - self.opened
        ends = {key: len(held) - 1 for key, held in self.log.items() if held}
        unmarked = new - self.folded.marked
        for marker in opening_markers(unmarked, self.folded.derived_upto, ends, TOPICS, FAILED_AT):
            self.log.setdefault((TOPICS.lifecycle, marker.partition), []).append(marker)
        self.folded.marked |= unmarked
        self.opened |= new

    def write(self, events: Iterable[DerivedEvent]) -> list[SourcePosition]:
        """Log ``events``; returns where each landed (what the producer's metadata says)."""
        landed: list[SourcePosition] = []
        for event in events:
            topic = TOPICS.derived_topic(event)
            logged = self.log.setdefault((topic, partition_of(event)), [])
            logged.append(event)
            landed.append(
                SourcePosition(topic=topic, partition=partition_of(event), offset=len(logged) - 1)
            )
        return landed

    def mark(self, batch: DerivedBatch, landed: list[SourcePosition]) -> None:
        """Log the batch's markers, once everything it derived is in the log."""
        for marker in batch.markers(landed, FAILED_AT):
            self.log.setdefault((TOPICS.lifecycle, marker.partition), []).append(marker)

    @property
    def emitted(self) -> list[DerivedEvent]:
        return [e for batch in self.applied for e in batch]

    def read_back(self, seed: int = 0) -> list[Logged]:
        """The log as :func:`streams.eventlog.derived_log.read_records` returns it, with where each
        record is: topic by topic, each topic's partitions interleaved in an arbitrary way,
        each partition in log order."""
        rng = random.Random(seed)
        out: list[Logged] = []
        for topic in (TOPICS.items, TOPICS.lifecycle):
            pending = [
                [
                    (SourcePosition(topic=t, partition=p, offset=o), record)
                    for o, record in enumerate(records)
                ]
                for (t, p), records in sorted(self.log.items())
                if t == topic
            ]
            while pending:
                source = rng.choice(pending)
                taken = rng.randint(1, 3)
                out.extend(source[:taken])
                del source[:taken]
                pending = [p for p in pending if p]
        return out

    def replayed(self, seed: int = 0) -> list[DerivedEvent]:
        """The derived log in the order a rebuild applies it (:mod:`streams.rebuild.from_log`): the
        wholly logged batches, in causal order."""
        return causal_order(logged_batches(self.read_back(seed), TOPICS.schedule).events)

    @classmethod
    def take_over(
        cls,
        log: dict[tuple[str, int], list[DerivedRecord]],
        retrievals: Iterable[RawRecord],
        seed: int = 0,
    ) -> Worker:
        """A new worker whose state is folded from ``log`` and the ``retrievals`` on
        ``memory.access`` (as :func:`streams.eventlog.derived_log.recover_state` does); it goes on
        writing to the same log."""
        worker = cls(log={key: list(events) for key, events in log.items()})
        worker.folded, logged = FoldedState.from_log(worker.read_back(seed), TOPICS.schedule)
        for raw in retrievals:
            assert raw.value is not None
            position = SourcePosition(topic=raw.topic, partition=raw.partition, offset=raw.offset)
            worker.folded.apply_retrieval(decode_retrieval(raw.value), position)
        for event in logged:
            worker.partition_of[event.agent_id] = partition_of(event)
        return worker


def run(batches: Iterable[Sequence[RawRecord]]) -> Worker:
    worker = Worker()
    for batch in batches:
        worker.handle(batch)
    return worker


@dataclass
class StreamBuilder:
    """Turns actions into raw records, processing each as it goes (one record per batch), so
    that retrievals name summaries that exist when they are made."""

    worker: Worker = field(default_factory=Worker)
    records: list[RawRecord] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    now: datetime = START
    published: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    """Per agent and event type, the ids of the events published, for feedback to target."""
    stated: dict[str, list[str]] = field(default_factory=dict)
    """Per agent, the ids of the facts it stated (current or not), for searches to return."""
    this_life: dict[str, list[str]] = field(default_factory=dict)
    """Per agent, the ids of its observations and decisions since it was last forgotten: those
    an event may use again. Not one of an ended life: a retrieval of that life's summary,
    folded at a takeover after everything else, would count for the next life's summary made
    under the same id (processors/README.md, "An event id used again")."""

    def add(self, topic: str, partition: int, value: bytes, kind: RecordKind) -> None:
        offset = self.offsets.get((topic, partition), 0)
        self.offsets[(topic, partition)] = offset + 1
        expected = TOPICS.event_type_of(topic)
        # Stamped at the time of the action, which only moves on: a batch's canonical order is
        # then the order the records were made in.
        stamp = round(self.now.timestamp() * 1000)
        key = agent_key_of(value) if kind == "agent" else b"key"
        raw = RawRecord(topic, partition, offset, key, value, expected, kind, stamp)
        self.records.append(raw)
        for event in self.worker.handle([raw]):
            if isinstance(event, FactStated):
                self.stated.setdefault(event.agent_id, []).append(event.fact_id)

    def act(self, n: int, who: str, what: str, value: int) -> None:
        self.now += timedelta(seconds=7)
        if what == "tick":
            self.now += timedelta(seconds=value)
            tick = ScheduleTick(
                event_id=f"tick-{n}", occurred_at=self.now, partition=int(who), interval_seconds=60
            )
            self.add(TOPICS.schedule, int(who), encode_event(tick), "tick")
            return
        partition = PARTITION_OF[who]
        if what == "forget":
            # Unsealed (the worker model has no keyring): the earlier life stays readable, and
            # the erasure must sit between it and the next one in every reading of the log.
            forget = ForgetAgent(event_id=f"forget-{n}", agent_id=who, requested_at=self.now)
            self.add(TOPICS.schedule, partition, encode_event(forget), "tick")
            self.this_life[who] = []
            return
        clock = self.steps.get(who, 0)
        step = clock if who.startswith("S") else None
        year = clock // 4 if who.startswith("S") else clock if who.startswith("Y") else None
        when = {
            "agent_id": who,
            "event_id": f"{who}-{n}",
            "occurred_at": self.now,
            "step": step,
            "year": year,
        }
        if what == "advance":
            self.steps[who] = clock + value
        elif what == "observe":
            importance, kind = (
                IMPORTANCES[value % len(IMPORTANCES)],
                KINDS[value // len(IMPORTANCES)],
            )
            observation = Observation(
                **when,
                agent_type="household",
                content=f"my neighbor saw flood warning {n} at the river, {n % 3} houses wet",
                importance=importance,
                kind=kind,
                tags=("flood", f"n{n % 4}"),
                reset_surprise=n % 9 == 8,
            )
            self.published.setdefault((who, "observation"), []).append(observation.event_id)
            self.this_life.setdefault(who, []).append(observation.event_id)
            self.add(TOPICS.observations, partition, encode_event(observation), "agent")
        elif what == "decide":
            self.decide(n, when, value)
        elif what == "feedback":
            self.feedback(n, when, value)
        elif what == "fact":
            observation = Observation(
                **when,
                agent_type="household",
                content=f"the house measures {n} at event {n}",
                fact=FactStatement(
                    subject="house", attribute=("elevation", "insured")[value % 2], value=str(n)
                ),
            )
            self.add(TOPICS.observations, partition, encode_event(observation), "agent")
        elif what == "reuse":
            self.reuse(n, when, value)
        elif what == "search_facts":
            self.search_facts(n, who, value)
        elif what == "garbage":
            self.add(TOPICS.observations, partition, b'{"event_type": "observation"', "agent")
        else:
            self.retrieve(n, who, SCORES[value], step, year)

    def reuse(self, n: int, when: dict[str, object], value: int) -> None:
        """An observation under an event id the agent used before in this life: its oldest
        (whose memory is likely forgotten, so it records again) or one of its latest (likely
        still held, so it is refused)."""
        agent = str(when["agent_id"])
        used = self.this_life.get(agent, [])
        if not used:
            return
        observation = Observation(
            **(when | {"event_id": used[0] if value == 0 else used[-min(value, len(used))]}),
            agent_type="household",
            content=f"again, flood warning {n} at the river",
            importance=IMPORTANCES[(n + value) % len(IMPORTANCES)],
            tags=("flood",),
        )
        self.add(TOPICS.observations, PARTITION_OF[agent], encode_event(observation), "agent")

    def decide(self, n: int, when: dict[str, object], value: int) -> None:
        """A decision; every other skill index also carries a prompt and steps (a plan)."""
        skill = SKILLS[value % len(SKILLS)]
        plan = value >= len(SKILLS)
        decision = Decision.model_validate(
            {
                **when,
                "agent_type": "household",
                "content": f"I decided to {skill.replace('_', ' ')} after event {n}",
                "skill": skill,
                "prompt": f"protect the house from flood {value % 3}" if plan else None,
                "actions": [{"tool": skill, "input": str(n), "observation": "ok"}] if plan else [],
            }
        )
        self.published.setdefault((decision.agent_id, "decision"), []).append(decision.event_id)
        self.this_life.setdefault(decision.agent_id, []).append(decision.event_id)
        self.add(TOPICS.decisions, PARTITION_OF[decision.agent_id], encode_event(decision), "agent")

    def feedback(self, n: int, when: dict[str, object], value: int) -> None:
        """Feedback on one of the agent's decisions, or (odd values) on another event of it."""
        agent = str(when["agent_id"])
        targets = self.published.get((agent, "decision" if value % 2 == 0 else "observation"))
        state = self.worker.folded.states.get(agent)
        if value % 4 == 3 and state is not None and state.summaries:
            targets = [s.memory_id for s in state.summaries]
        if not targets:
            return
        feedback = Feedback.model_validate(
            {
                **when,
                "agent_type": "household",
                "target_event_id": targets[-1 - (n % min(3, len(targets)))],
                "signal": SIGNALS[(value // 2) % len(SIGNALS)],
            }
        )
        self.add(TOPICS.feedback, PARTITION_OF[agent], encode_event(feedback), "agent")

    def retrieve(
        self, n: int, agent: str, score: float, step: int | None, year: int | None
    ) -> None:
        state = self.worker.folded.states.get(agent)
        if state is None or not state.summaries:
            return
        target = state.summaries[n % len(state.summaries)]
        retrieval = MemoryRetrieved(
            agent_id=agent,
            event_id=f"r-{n}",
            occurred_at=self.now,
            step=step,
            year=year,
            mode="two_phase",
            parameters={"top_k": 3},
            results=(
                RetrievedItem(
                    memory_id=target.memory_id,
                    rank=1,
                    score=score,
                    store="episodic",
                    level=1 if target.level == 1 else 2,
                ),
            ),
            took_ms=1.0,
        )
        self.add(TOPICS.access, PARTITION_OF[agent], encode_event(retrieval), "retrieval")

    def search_facts(self, n: int, agent: str, value: int) -> None:
        """A facts read with a query, as the query service records it: some of the facts the
        agent holds (the projection's current ones), best first; ``value`` 3 adds one it
        stated earlier and no longer holds (a search with ``history``: counts nothing), and a
        fact returned twice (counted once)."""
        state = self.worker.folded.states.get(agent)
        held = [] if state is None else list(state.learned.facts.values())
        returned = held[n % len(held) :][: 1 + value % 3] if held else []
        if value == 3:
            gone = [f for f in self.stated.get(agent, []) if f not in held]
            returned = [*gone[-1:], *returned, *returned[:1]]
        search = MemoryRetrieved(
            agent_id=agent,
            event_id=f"facts-{n}",
            occurred_at=self.now,
            mode=FACTS_READ_MODE,
            parameters={"query": f"the house {n}", "top_k": 5},
            results=tuple(
                RetrievedItem(memory_id=f, rank=rank, score=0.5, store="facts")
                for rank, f in enumerate(returned, start=1)
            ),
            took_ms=1.0,
        )
        self.add(TOPICS.access, PARTITION_OF[agent], encode_event(search), "retrieval")


def build_stream(actions: Iterable[Action]) -> tuple[list[RawRecord], Worker]:
    """The raw records of ``actions``, and the worker that processed them one at a time."""
    builder = StreamBuilder()
    for n, (who, what, value) in enumerate(actions):
        builder.act(n, who, what, value)
    return builder.records, builder.worker


def projected(events: Iterable[DerivedEvent]) -> dict[str, DerivedEvent]:
    """What a projection holds after applying ``events`` in order: the last word per id."""
    held: dict[str, DerivedEvent] = {}
    for event in events:
        if isinstance(event, MemoryForgotten):
            held.pop(event.memory_id, None)
        elif isinstance(event, AgentForgotten):
            held = {k: e for k, e in held.items() if e.agent_id != event.agent_id}
        elif isinstance(event, MemoryRecorded | MemoryPromoted | MemorySummarised):
            held[event.memory_id] = event
    return held


def learned_projected(events: Iterable[DerivedEvent]) -> dict[bytes, bytes]:
    """What the Redis projection of learned items holds after ``events`` in order (the write
    rule of ``projections.learned.redis_fields``: a field is written at a revision at least
    the one it holds; an empty value deletes it), per agent and field."""
    held: dict[bytes, bytes] = {}
    revisions: dict[bytes, int] = {}
    for event in events:
        if not isinstance(event, LearnedChange):
            continue
        for name, revision, value in learned_writes(event):  # type: ignore[arg-type]
            key = event.agent_id.encode() + b"/" + name
            if revisions.get(key, -1) > revision:
                continue
            revisions[key] = revision
            if value:
                held[key] = value
            else:
                held.pop(key, None)
    return held


def derived_in_batches(
    batches: Iterable[Sequence[RawRecord]],
) -> tuple[list[DerivedEvent], dict[str, AgentMemoryState]]:
    """Each batch derived as a worker derives it (nothing sealed), the agents' states carried
    from one to the next: what they derived, and the states they left."""
    states: dict[str, AgentMemoryState] = {}
    derived: list[DerivedEvent] = []
    for batch in batches:
        result = process_batch(
            batch,
            lambda a: states.get(a) or AgentMemoryState(),
            ctx=CTX,
            failed_at=START,
            opener=PlainRecords(),
        )
        states.update(result.states)
        derived += result.derived
    return derived, states


def reused_after_forgetting() -> tuple[list[DerivedEvent], dict[tuple[str, int], int]]:
    """A1's observation x, pushed out of working memory (capacity 4) by four decisions, then
    published again under its id (so it records a new memory, seq 5): the derived log in causal
    order, one record a batch, and the last offset of each source partition."""
    spec = [("obs", "x"), ("dec", "d0"), ("dec", "d1"), ("dec", "d2"), ("dec", "d3"), ("obs", "x")]
    offsets: dict[tuple[str, int], int] = {}
    batches: list[list[RawRecord]] = []
    for i, (kind, event_id) in enumerate(spec):
        when = {"agent_id": "A1", "event_id": event_id, "occurred_at": START + timedelta(i)}
        if kind == "obs":
            event: Observation | Decision = Observation(
                **when, content=f"life {i} of {event_id}", importance=0.3
            )
        else:
            event = Decision(**when, content=f"decided {event_id}", skill="s", importance=0.3)
        topic = TOPICS.for_event_type(event.event_type)
        offset = offsets[(topic, 0)] = offsets.get((topic, 0), -1) + 1
        raw = RawRecord(topic, 0, offset, b"A1", encode_event(event), event.event_type, "agent", i)
        batches.append([raw])
    derived, _ = derived_in_batches(batches)
    return causal_order(derived), offsets
