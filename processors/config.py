"""The versioned configuration of processing: profiles per agent type, routing and capacities.

A derived event records ``config_version``, a hash of this configuration and the embedder, so a
replay or a reprocess can tell which rules produced a memory (DESIGN.md, invariant 2).
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator


class AgentTypeProfile(BaseModel):
    """How one kind of agent weighs what happens to it (seed 003, ``agent_types.yaml``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    emotional_weights: dict[str, float]
    source_weights: dict[str, float]
    emotion_keywords: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    source_patterns: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    event_importance: dict[str, float] = Field(default_factory=dict)
    default_emotion: str = "routine"
    default_source: str = "abstract"

    @field_validator("emotional_weights", "source_weights", "event_importance")
    @classmethod
    def _weights_in_unit_interval(cls, value: dict[str, float]) -> dict[str, float]:
        bad = {k: v for k, v in value.items() if not 0.0 <= v <= 1.0}
        if bad:
            raise ValueError(f"weights must lie in [0, 1]: {bad}")
        return value

    @field_validator("emotion_keywords", "source_patterns")
    @classmethod
    def _lowercase(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        return {k: tuple(p.lower() for p in v) for k, v in value.items()}


class ProcessingConfig(BaseModel):
    """Everything a processor's output depends on besides the events it reads."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_types: dict[str, AgentTypeProfile]
    episodic_threshold: float = Field(default=0.7, ge=0.0, le=1.0)
    working_capacity: int = Field(default=10, ge=1)
    episodic_capacity: int = Field(default=50, ge=1)

    @field_validator("agent_types")
    @classmethod
    def _has_default(cls, value: dict[str, AgentTypeProfile]) -> dict[str, AgentTypeProfile]:
        if "default" not in value:
            raise ValueError("agent_types needs a 'default' profile for unknown agent types")
        return value

    def profile_for(self, agent_type: str) -> AgentTypeProfile:
        return self.agent_types.get(agent_type) or self.agent_types["default"]

    def version(self, embedder_id: str) -> str:
        """A short, stable hash of the rules and the embedder."""
        blob = orjson.dumps(
            {"config": self.model_dump(mode="json"), "embedder": embedder_id},
            option=orjson.OPT_SORT_KEYS,
        )
        return hashlib.sha256(blob).hexdigest()[:12]


def _read_profiles(text: str, origin: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError(f"{origin}: expected a mapping of agent type to profile")
    return data


def load_processing_config(
    agent_types_path: Path | None = None,
    *,
    episodic_threshold: float = 0.7,
    working_capacity: int = 10,
    episodic_capacity: int = 50,
) -> ProcessingConfig:
    """Read the profiles from a YAML file, or the defaults shipped with Engram."""
    if agent_types_path is None:
        text = resources.files("processors").joinpath("agent_types.yaml").read_text("utf-8")
        origin = "built-in agent_types.yaml"
    else:
        text = agent_types_path.read_text("utf-8")
        origin = str(agent_types_path)
    return ProcessingConfig(
        agent_types=_read_profiles(text, origin),
        episodic_threshold=episodic_threshold,
        working_capacity=working_capacity,
        episodic_capacity=episodic_capacity,
    )
