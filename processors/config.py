"""The versioned configuration of processing: profiles per agent type, routing and capacities.

A derived event records ``config_version``, a hash of this configuration and the embedder, so a
replay or a reprocess can tell which rules produced a memory (streams/README.md, invariant 2).
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from processors.learning_config import LearningRules
from processors.source_text import source_pattern

Symbol = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")]
"""A sensor name or level: no ``:`` or ``|``, which join them into a signature."""

ArousalThreshold = Annotated[float, Field(ge=0.0, le=1.0)]
MaxEntries = Annotated[int, Field(ge=2, le=4096)]
"""Bound of a frequency table: a surprise state never grows beyond it (seed 003 keeps every
signature; a log-carried state must not, see ``processors.surprise``)."""


class EmaSurprise(BaseModel):
    """Scalar prediction error against an exponential moving average (seed 003, section 3.1).

    ``alpha`` 0.3: the expectation's half-life is about two observations (0.7^2 ~ 0.5), so a
    stimulus repeated every simulated year stops being surprising after four or five years,
    about as slowly as the symbolic "boiling frog" trace of section 4.3 habituates, while one
    outlier does not move the expectation most of the way. ``initial_expectation`` None: the
    first stimulus sets the expectation and surprises nothing (there was no prediction to err);
    a number is the expectation before any stimulus (section 3.1's 0.1 m of water).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    strategy: Literal["ema"] = "ema"
    stimulus_key: str = Field(min_length=1, max_length=128)
    alpha: float = Field(default=0.3, gt=0.0, le=1.0)
    scale: float = Field(default=1.0, gt=0.0)
    initial_expectation: float | None = None
    arousal_threshold: ArousalThreshold = 0.5


class Sensor(BaseModel):
    """One symbolic sensor (seed 003, section 4.2: ``FLOOD:HIGH``): it reads a level from the
    event, or stays silent.

    The level comes from the first source that gives one, in this order: the metadata value at
    ``key`` (a number falls in the ``bands`` level with the highest lower bound at or below
    it, silent below every bound; a string or a boolean, as ``true``/``false``, is looked up
    in ``values``), then the event's ``kind`` in ``kinds``, then the first of ``tags`` (in the
    order configured) that the event carries.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Symbol
    key: str | None = Field(default=None, min_length=1, max_length=128)
    bands: dict[Symbol, float] = Field(default_factory=dict)
    values: dict[str, Symbol] = Field(default_factory=dict)
    kinds: dict[str, Symbol] = Field(default_factory=dict)
    tags: dict[str, Symbol] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _reads_something(self) -> Sensor:
        if self.key is None and (self.bands or self.values):
            raise ValueError(f"sensor {self.name}: bands and values need a metadata key")
        if self.key is not None and not (self.bands or self.values):
            raise ValueError(f"sensor {self.name}: a metadata key needs bands or values")
        if self.key is None and not (self.kinds or self.tags):
            raise ValueError(f"sensor {self.name}: give a metadata key, kinds or tags")
        return self


class SymbolicSurprise(BaseModel):
    """Surprise as 1 - P(signature) over the agent's own history (seed 003, section 4)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    strategy: Literal["symbolic"] = "symbolic"
    sensors: tuple[Sensor, ...] = Field(min_length=1)
    arousal_threshold: ArousalThreshold = 0.5
    max_signatures: MaxEntries = 256

    @field_validator("sensors")
    @classmethod
    def _distinct_names(cls, value: tuple[Sensor, ...]) -> tuple[Sensor, ...]:
        names = [s.name for s in value]
        if len(set(names)) != len(names):
            raise ValueError(f"sensor names must be distinct: {names}")
        return value


class DecisionConsistencySurprise(BaseModel):
    """Surprise at the agent's own action (seed 003, section 2b, DCS): zero domain
    configuration, so it is the default of every agent type."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    strategy: Literal["decision_consistency"] = "decision_consistency"
    mode: Literal["unigram", "bigram"] = "unigram"
    arousal_threshold: ArousalThreshold = 0.5
    max_actions: MaxEntries = 256


SurpriseConfig = Annotated[
    EmaSurprise | SymbolicSurprise | DecisionConsistencySurprise,
    Field(discriminator="strategy"),
]


class AgentTypeProfile(BaseModel):
    """How one kind of agent weighs what happens to it (seed 003, ``agent_types.yaml``).

    ``surprise`` is its surprise strategy (``null`` in YAML: none, no arousal is recorded);
    ``learning`` its rules of learning from feedback (:mod:`processors.learning_config`).

    ``working_capacity``, ``episodic_capacity`` and ``episodic_threshold`` override the global
    values of :class:`ProcessingConfig` for agents of this type (None: the global value). A
    type's weights and its capacities go together: a chat assistant records one memory per
    turn and needs far more room than a simulated household that lives a few events a year.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    emotional_weights: dict[str, float]
    source_weights: dict[str, float]
    emotion_keywords: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    source_patterns: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    event_importance: dict[str, float] = Field(default_factory=dict)
    default_emotion: str = "routine"
    default_source: str = "abstract"
    surprise: SurpriseConfig | None = Field(default_factory=DecisionConsistencySurprise)
    learning: LearningRules = Field(default_factory=LearningRules)
    working_capacity: int | None = Field(default=None, ge=1)
    episodic_capacity: int | None = Field(default=None, ge=1)
    episodic_threshold: float | None = Field(default=None, ge=0.0, le=1.0)

    @field_validator("emotional_weights", "source_weights", "event_importance")
    @classmethod
    def _weights_in_unit_interval(cls, value: dict[str, float]) -> dict[str, float]:
        bad = {k: v for k, v in value.items() if not 0.0 <= v <= 1.0}
        if bad:
            raise ValueError(f"weights must lie in [0, 1]: {bad}")
        return value

    @field_validator("emotion_keywords")
    @classmethod
    def _lowercase(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        return {k: tuple(p.lower() for p in v) for k, v in value.items()}

    @field_validator("source_patterns")
    @classmethod
    def _as_matched(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        """Written as the text they are matched in is (:mod:`processors.source_text`), so one
        with punctuation still matches; one of punctuation alone would match any space."""
        patterns = {k: tuple(source_pattern(p) for p in v) for k, v in value.items()}
        blank = sorted({k for k, v in patterns.items() for p in v if not p.strip()})
        if blank:
            raise ValueError(f"a source pattern of {', '.join(blank)} is punctuation alone")
        return patterns


class ConsolidationRules(BaseModel):
    """Year-end promotion of working memories to episodic memory.

    Seed 004 section 4.3 promotes working memories with importance >= 0.7; seed 003 adds a
    consolidation gate (0.6) passed with a burning probability (0.8). Engram applies both: at or
    above ``promotion_threshold`` a memory is promoted, between ``gate`` and the threshold it is
    promoted when a draw seeded from its event id falls below ``burn_probability``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    promotion_threshold: float = Field(default=0.7, ge=0.0, le=1.0)
    gate: float = Field(default=0.6, ge=0.0, le=1.0)
    burn_probability: float = Field(default=0.8, ge=0.0, le=1.0)


class SummaryRules(BaseModel):
    """L1 session and L2 chapter summaries (seed 001).

    A session ends when a simulation agent's step (or, without steps, its year) moves on, or at
    a wall-clock tick for agents whose events carry neither. An L2 chapter closes every
    ``chapter_length`` steps (seed 001: 10) or, for wall-clock agents, at the tick
    ``sessions_per_chapter`` sessions (of the ticks' interval) from its first L1.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    l1_min_memories: int = Field(default=3, ge=1)
    chapter_length: int = Field(default=10, ge=1)
    l2_min_summaries: int = Field(default=2, ge=1)
    sessions_per_chapter: int = Field(default=10, ge=1)


class PruningRules(BaseModel):
    """Utility pruning of summaries by MUS = 0.4 F + 0.4 Rel + 0.2 Rec (seed 001).

    ``min_age_*`` is the configurable age before which a summary is never pruned, on the
    agent's own clock: in steps (or years) for simulation agents, in seconds for wall-clock ones.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    frequency_weight: float = Field(default=0.4, ge=0.0)
    relevance_weight: float = Field(default=0.4, ge=0.0)
    recency_weight: float = Field(default=0.2, ge=0.0)
    l1_threshold: float = Field(default=0.2, ge=0.0)
    l2_threshold: float = Field(default=0.3, ge=0.0)
    l1_min_age: int = Field(default=10, ge=0, description="Steps (or years).")
    l2_min_age: int = Field(default=50, ge=0, description="Steps (or years).")
    l1_min_age_seconds: float = Field(default=3600.0, ge=0.0)
    l2_min_age_seconds: float = Field(default=86400.0, ge=0.0)
    recency_unit_seconds: float = Field(
        default=86400.0, gt=0.0, description="Wall-clock recency counts ages in these units."
    )


class LifecycleRules(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    consolidation: ConsolidationRules = Field(default_factory=ConsolidationRules)
    summaries: SummaryRules = Field(default_factory=SummaryRules)
    pruning: PruningRules = Field(default_factory=PruningRules)


class ProcessingConfig(BaseModel):
    """Everything a processor's output depends on besides the events it reads."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_types: dict[str, AgentTypeProfile]
    episodic_threshold: float = Field(default=0.7, ge=0.0, le=1.0)
    working_capacity: int = Field(default=10, ge=1)
    episodic_capacity: int = Field(default=50, ge=1)
    lifecycle: LifecycleRules = Field(default_factory=LifecycleRules)

    @field_validator("agent_types")
    @classmethod
    def _has_default(cls, value: dict[str, AgentTypeProfile]) -> dict[str, AgentTypeProfile]:
        if "default" not in value:
            raise ValueError("agent_types needs a 'default' profile for unknown agent types")
        return value

    def profile_for(self, agent_type: str) -> AgentTypeProfile:
        return self.agent_types.get(agent_type) or self.agent_types["default"]

    def working_capacity_for(self, agent_type: str) -> int:
        """The agent type's own working capacity, else the global one."""
        own = self.profile_for(agent_type).working_capacity
        return self.working_capacity if own is None else own

    def episodic_capacity_for(self, agent_type: str) -> int:
        """The agent type's own episodic capacity, else the global one."""
        own = self.profile_for(agent_type).episodic_capacity
        return self.episodic_capacity if own is None else own

    def episodic_threshold_for(self, agent_type: str) -> float:
        """The agent type's own routing threshold, else the global one."""
        own = self.profile_for(agent_type).episodic_threshold
        return self.episodic_threshold if own is None else own

    def version(self, embedder_id: str, summariser_id: str = "extractive-v1") -> str:
        """A short, stable hash of the rules, the embedder and the summariser."""
        blob = orjson.dumps(
            {
                "config": self.model_dump(mode="json"),
                "embedder": embedder_id,
                "summariser": summariser_id,
            },
            option=orjson.OPT_SORT_KEYS,
        )
        return hashlib.sha256(blob).hexdigest()[:12]


def _read_profiles(text: str, origin: str) -> dict[str, Any]:
    """A ValueError naming the file, not an ``EngramError``: the settings import this module,
    and the command line starts without the ``schemas`` package (numpy) until a command runs."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{origin} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{origin}: expected a mapping of agent type to profile")
    return data


def load_processing_config(
    agent_types_path: Path | None = None,
    *,
    episodic_threshold: float = 0.7,
    working_capacity: int = 10,
    episodic_capacity: int = 50,
    lifecycle: LifecycleRules | None = None,
) -> ProcessingConfig:
    """Read the profiles from a YAML file, or the defaults shipped with Engram."""
    if agent_types_path is None:
        text = resources.files("processors").joinpath("agent_types.yaml").read_text("utf-8")
        origin = "built-in agent_types.yaml"
    else:
        try:
            text = agent_types_path.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(
                f"cannot read the agent types file {agent_types_path}: {exc}"
            ) from None
        origin = str(agent_types_path)
    return ProcessingConfig(
        agent_types=_read_profiles(text, origin),
        episodic_threshold=episodic_threshold,
        working_capacity=working_capacity,
        episodic_capacity=episodic_capacity,
        lifecycle=lifecycle or LifecycleRules(),
    )
