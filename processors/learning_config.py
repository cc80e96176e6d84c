"""The rules of learning from feedback, per agent type (``learning`` in ``agent_types.yaml``).

Part of :class:`processors.config.ProcessingConfig`, so of the configuration version every
derived event records: changing them changes what is derived from then on, and ``engram
reprocess`` derives the past again with them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ProcedureRules(BaseModel):
    """Procedures (seed 000): a decision's skill, with a success rate moved by feedback,
    ``rate = (1 - alpha) x rate + alpha x outcome``, from ``initial_success_rate``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    initial_success_rate: float = Field(default=0.5, ge=0.0, le=1.0)
    alpha: float = Field(default=0.1, gt=0.0, le=1.0)
    max_procedures: int = Field(
        default=256,
        ge=1,
        le=4096,
        description="Skills learned per agent; a decision with a further new skill teaches "
        "nothing (the agent's state must stay small).",
    )
    max_attached: int = Field(
        default=8,
        ge=0,
        le=64,
        description="Texts of upvoted decisions kept per procedure; the oldest is replaced.",
    )


class PlanRules(BaseModel):
    """The plan cache (seed 002). The seed names tau, epsilon and alpha without values:

    * ``similarity_threshold`` (tau) 0.8: a plan is replayed without planning again, so only a
      repeated or nearly identical request may hit. With the default hashing embedder one
      added word ("the next spring flood") keeps 0.84, another object ("barn" for "house")
      falls to 0.68; seed 002's 0.4 is its threshold for choosing a *tool*, a looser question.
    * ``alpha`` 0.3 and ``score_threshold`` (epsilon) 0.5: a plan starts at 1.0; two
      downvotes in a row evict it (1.0, 0.7, 0.49), one downvote among upvotes does not. Seed
      000's alpha 0.1 would need seven failures in a row, replaying a broken plan meanwhile.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    similarity_threshold: float = Field(default=0.8, ge=0.0, le=1.0)
    score_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    alpha: float = Field(default=0.3, gt=0.0, le=1.0)
    max_plans: int = Field(
        default=128,
        ge=1,
        le=4096,
        description="Plans cached per agent; beyond it the lowest-scored (then oldest) is "
        "evicted, by an event.",
    )


class FactRules(BaseModel):
    """Facts (seed 000's semantic memory): those an observation states, and those year-end
    consolidation derives from an observation kind the agent kept seeing that year
    (:mod:`processors.fact_patterns`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    from_patterns: bool = True
    pattern_min_count: int = Field(
        default=3,
        ge=2,
        le=64,
        description="Observations of one kind among the working memories a consolidation "
        "considers that make it a fact: 3, so that twice may still be chance.",
    )


class LearningRules(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    procedures: ProcedureRules = Field(default_factory=ProcedureRules)
    plans: PlanRules = Field(default_factory=PlanRules)
    facts: FactRules = Field(default_factory=FactRules)
