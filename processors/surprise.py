"""Surprise and arousal from an agent's own event stream (seed 003).

Three strategies behind one protocol (seed 003, section 2b, P1 ``SurpriseStrategy``), each a
pure ``observe(state, event) -> (reading, new state)`` over an immutable state that travels in
the log (:class:`schemas.memory_events.SurpriseReading`):

* **EMA** (section 3.1): a number read from the event's ``metadata[stimulus_key]``; the
  prediction error against the expectation E before it, ``PE = |x - E|``, gives
  ``surprise = min(1, PE / scale)``; then ``E <- (1 - alpha) E + alpha x``. The first stimulus
  sets E and surprises nothing, unless an ``initial_expectation`` is configured.
* **Symbolic signature** (section 4): configured sensors map the event to levels; the
  signature is the sorted ``NAME:LEVEL`` parts joined by ``|``, and
  ``surprise = 1 - P(signature)`` with ``P = times seen before / (observations before + 1)``,
  which gives the "boiling frog" trace of section 4.3 exactly (1.0, 0.5, 0.333, 0.25, and 1.0
  for a new combination). The seed's signature is the situation of a time step
  (``FLOOD:HIGH + NEIGHBOR:ELEVATING`` in Year 10): the events of one year (else one step)
  make one situation, its parts joined as they arrive, counted once when the next time
  begins; an event's ``P`` is the share of earlier situations that hold everything seen so
  far in its own. A flood and the claim it brings are then one situation a year, not two
  signatures that each stay half as likely (a household flooded and paid every year stayed
  in System 2 for good). An event without a year or a step is a situation of its own.
* **Decision consistency** (section 2b, DCS), from Decision events' ``skill``, with Laplace
  smoothing over a vocabulary ``V`` = the distinct actions seen before + 1 (one slot for every
  action not seen yet, so the probabilities of a history sum to 1):

  - unigram: ``P(a) = (n(a) + 1) / (N + V)``, ``N`` the decisions before;
  - bigram: ``P(a | p) = (n(p -> a) + 1) / (n(p -> *) + V)``, ``p`` the previous action; the
    first decision, which has none, takes the unigram estimate;

  and ``surprise = 1 - P``. The first decision of all has ``V = 1`` and ``P = 1``: nothing was
  expected, so nothing surprises (System 1).

An event the strategy does not read (no stimulus, no sensor fires, not a decision) gives no
reading and leaves the state as it is: the agent's arousal stays what it was.

**Arousal** is the latest surprise (seed 003 keeps it that simple: "If PE >= 0.5, switch to
System 2"), and the agent is in ``SYSTEM_2`` when arousal >= ``arousal_threshold`` (0.5, seed
003 sections 3.1 and 6), else ``SYSTEM_1``. Section 4.3's table labels its Year 2 (surprise
exactly 0.5) System 1; the rule of section 3.1 (>=) is the one applied here.

**Bounded state**: a frequency table (signatures, actions, transitions) keeps at most
``max_signatures`` / ``max_actions`` entries (256 by default). Beyond that the least-seen entry
is dropped, the least recently seen among equals, never the one just observed; the counts of
observations stay, so a dropped symbol seen again is simply new. The state is carried on every
reading in the log, so it must never grow without limit.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from itertools import islice
from typing import Any, Protocol, TypeVar

from processors.config import (
    DecisionConsistencySurprise,
    EmaSurprise,
    Sensor,
    SurpriseConfig,
    SymbolicSurprise,
)
from schemas.agent_events import AgentEvent, Decision
from schemas.memory_events import (
    CognitiveSystem,
    ConsistencyState,
    EmaState,
    SurpriseReading,
    SurpriseState,
    SymbolicState,
)

__all__ = [
    "ConsistencyStrategy",
    "EmaStrategy",
    "Observed",
    "SurpriseStrategy",
    "SymbolicStrategy",
    "assess",
    "cognitive_system",
    "signature_of",
    "strategy_for",
]

StateT = TypeVar("StateT", EmaState, SymbolicState, ConsistencyState)
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Observed:
    """What one strategy made of one event: the surprise and the trace behind it."""

    surprise: float
    observed: str | float
    expectation: float | None = None
    probability: float | None = None


class SurpriseStrategy(Protocol[StateT]):
    def restore(self, state: SurpriseState | None) -> StateT:
        """``state`` if it is this strategy's, else its initial state (a new agent, or an
        agent whose type now has another strategy)."""

    def observe(self, state: StateT, event: AgentEvent) -> tuple[Observed | None, StateT]:
        """The surprise of ``event`` given ``state``, and the state after it; None and
        ``state`` itself when the strategy does not read the event."""


def cognitive_system(arousal: float, threshold: float) -> CognitiveSystem:
    """System 2 at or above the threshold (seed 003, section 3.1: "If PE >= 0.5")."""
    return "SYSTEM_2" if arousal >= threshold else "SYSTEM_1"


def _bounded(table: dict[K, int], limit: int) -> dict[K, int]:
    """Drop the least-seen entries (the least recently seen first among equals) until at most
    ``limit`` remain. ``table`` is in recency order, the entry just observed last, which is
    never dropped."""
    while len(table) > limit:
        victim = min(islice(table, len(table) - 1), key=table.__getitem__)
        del table[victim]
    return table


def _number(value: object) -> float | None:
    """A finite number from a JSON value; booleans are not numbers here."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class EmaStrategy:
    config: EmaSurprise

    def restore(self, state: SurpriseState | None) -> EmaState:
        return state if isinstance(state, EmaState) else EmaState()

    def observe(self, state: EmaState, event: AgentEvent) -> tuple[Observed | None, EmaState]:
        x = _number(event.metadata.get(self.config.stimulus_key))
        if x is None:
            return None, state
        before = state.expectation
        if before is None:
            before = self.config.initial_expectation
        if before is None:
            return Observed(0.0, x), EmaState(expectation=x, observations=1)
        # abs(x - before) may overflow to inf for extreme values: min() then gives 1.0. The
        # convex combination below never overflows, so the state stays finite (JSON).
        surprise = min(1.0, abs(x - before) / self.config.scale)
        alpha = self.config.alpha
        after = (1.0 - alpha) * before + alpha * x
        return (
            Observed(surprise, x, expectation=before),
            EmaState(expectation=after, observations=state.observations + 1),
        )


def _band(bands: dict[str, float], value: float) -> str | None:
    """The level whose lower bound is the highest one at or below ``value``."""
    best: tuple[float, str] | None = None
    for level, bound in bands.items():
        if bound <= value and (best is None or bound > best[0]):
            best = (bound, level)
    return None if best is None else best[1]


def _level(sensor: Sensor, event: AgentEvent) -> str | None:
    """The level ``sensor`` reads from ``event`` (see :class:`processors.config.Sensor`)."""
    if sensor.key is not None and sensor.key in event.metadata:
        value = event.metadata[sensor.key]
        level: str | None = None
        if isinstance(value, bool):
            level = sensor.values.get("true" if value else "false")
        elif isinstance(value, str):
            level = sensor.values.get(value)
        else:
            number = _number(value)
            if number is not None:
                level = _band(sensor.bands, number)
        if level is not None:
            return level
    if event.kind is not None:
        level = sensor.kinds.get(event.kind)
        if level is not None:
            return level
    if sensor.tags and event.tags:
        for tag, level in sensor.tags.items():
            if tag in event.tags:
                return level
    return None


def parts_of(sensors: tuple[Sensor, ...], event: AgentEvent) -> list[str]:
    """``NAME:LEVEL`` of every sensor that reads a level, sorted."""
    return sorted(
        f"{sensor.name}:{level}"
        for sensor in sensors
        if (level := _level(sensor, event)) is not None
    )


def signature_of(sensors: tuple[Sensor, ...], event: AgentEvent) -> str | None:
    """The parts joined by ``|`` (seed 003, section 4.2: ``FLOOD:HIGH|PANIC:LOW``); None when
    every sensor is silent."""
    return "|".join(parts_of(sensors, event)) or None


@dataclass(frozen=True)
class SymbolicStrategy:
    config: SymbolicSurprise

    def restore(self, state: SurpriseState | None) -> SymbolicState:
        return state if isinstance(state, SymbolicState) else SymbolicState()

    def observe(
        self, state: SymbolicState, event: AgentEvent
    ) -> tuple[Observed | None, SymbolicState]:
        parts = parts_of(self.config.sensors, event)
        if not parts:
            return None, state
        period = event.year if event.year is not None else event.step
        seen, observations = dict(state.seen), state.observations
        if state.situation and (period is None or period != state.period):
            # The time of the last situation is over: it is counted now, once.
            ended = "|".join(state.situation)
            seen[ended] = seen.pop(ended, 0) + 1
            observations += 1
            _bounded(seen, self.config.max_signatures)
        if period is None:
            signature = "|".join(parts)
            before = seen.pop(signature, 0)
            probability = before / (observations + 1)
            seen[signature] = before + 1
            after = SymbolicState(
                observations=observations + 1,
                seen=tuple(_bounded(seen, self.config.max_signatures).items()),
            )
            return Observed(1.0 - probability, signature, probability=probability), after
        so_far = state.situation if period == state.period else ()
        situation = tuple(sorted({*so_far, *parts}))
        # Seen so far, the situation is any earlier one that holds all of it: the events of
        # one time arrive one by one (a flood, then the claim it brings).
        wanted = set(situation)
        held = sum(n for signature, n in seen.items() if wanted <= set(signature.split("|")))
        probability = held / (observations + 1)
        after = SymbolicState(
            observations=observations,
            seen=tuple(seen.items()),
            period=period,
            situation=situation,
        )
        observed = "|".join(situation)
        return Observed(1.0 - probability, observed, probability=probability), after


@dataclass(frozen=True)
class ConsistencyStrategy:
    config: DecisionConsistencySurprise

    def restore(self, state: SurpriseState | None) -> ConsistencyState:
        return state if isinstance(state, ConsistencyState) else ConsistencyState()

    def observe(
        self, state: ConsistencyState, event: AgentEvent
    ) -> tuple[Observed | None, ConsistencyState]:
        if not isinstance(event, Decision):
            return None, state
        action = event.skill
        limit = self.config.max_actions
        actions = dict(state.actions)
        vocabulary = len(actions) + 1
        taken = actions.pop(action, 0)
        transitions = state.transitions
        previous = state.previous
        if self.config.mode == "bigram" and previous is not None:
            table = {(p, a): n for p, a, n in transitions}
            out = sum(n for (p, _), n in table.items() if p == previous)
            followed = table.pop((previous, action), 0)
            probability = (followed + 1) / (out + vocabulary)
            table[(previous, action)] = followed + 1
            transitions = tuple((p, a, n) for (p, a), n in _bounded(table, limit).items())
        else:
            probability = (taken + 1) / (state.observations + vocabulary)
        actions[action] = taken + 1
        after = ConsistencyState(
            observations=state.observations + 1,
            actions=tuple(_bounded(actions, limit).items()),
            previous=action,
            transitions=transitions,
        )
        return Observed(1.0 - probability, action, probability=probability), after


def strategy_for(config: SurpriseConfig) -> SurpriseStrategy[Any]:
    if isinstance(config, EmaSurprise):
        return EmaStrategy(config)
    if isinstance(config, SymbolicSurprise):
        return SymbolicStrategy(config)
    return ConsistencyStrategy(config)


def assess(
    config: SurpriseConfig | None, last: SurpriseReading | None, event: AgentEvent
) -> SurpriseReading | None:
    """The reading of ``event`` for an agent whose latest reading is ``last``, or None when
    the strategy does not read the event (or the agent type has none).

    An event that begins a new episode (``reset_surprise``, seed 003's ``reset_surprise()``)
    is read from the strategy's initial state. Read or not, it gives a reading, so that the
    reset travels in the log with its recording: one the strategy does not read is
    ``observed`` ``"reset"``, surprising nothing (System 1)."""
    if config is None:
        return None
    strategy = strategy_for(config)
    reset = event.reset_surprise
    before = strategy.restore(None if last is None or reset else last.state)
    observed, state = strategy.observe(before, event)
    if observed is None:
        if not reset:
            return None
        return SurpriseReading(
            strategy=config.strategy,
            observed="reset",
            surprise=0.0,
            arousal=0.0,
            threshold=config.arousal_threshold,
            system=cognitive_system(0.0, config.arousal_threshold),
            state=state,
        )
    arousal = observed.surprise
    return SurpriseReading(
        strategy=config.strategy,
        observed=observed.observed,
        expectation=observed.expectation,
        probability=observed.probability,
        surprise=observed.surprise,
        arousal=arousal,
        threshold=config.arousal_threshold,
        system=cognitive_system(arousal, config.arousal_threshold),
        state=state,
    )
