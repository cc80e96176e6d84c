"""JSON Schema export, so that producers in any language can validate before publishing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from schemas.agent_events import Decision, Feedback, Observation
from schemas.deadletter import DeadLetter
from schemas.learned_events import (
    FactAccessed,
    FactStated,
    MemoryRated,
    PlanChanged,
    ProcedureChanged,
)
from schemas.memory_events import (
    AgentForgotten,
    ConsolidationCompleted,
    DerivedUpTo,
    ForgetAgent,
    MemoryForgotten,
    MemoryPromoted,
    MemoryRecorded,
    MemoryRetrieved,
    MemorySummarised,
    ScheduleTick,
)

EXPORTED: dict[str, type[BaseModel]] = {  # every event type, as README.md says
    "observation": Observation,
    "decision": Decision,
    "feedback": Feedback,
    "memory.recorded": MemoryRecorded,
    "memory.promoted": MemoryPromoted,
    "memory.summarised": MemorySummarised,
    "memory.forgotten": MemoryForgotten,
    "memory.agent_forgotten": AgentForgotten,
    "memory.consolidated": ConsolidationCompleted,
    "memory.logged": DerivedUpTo,
    "memory.retrieved": MemoryRetrieved,
    "schedule.tick": ScheduleTick,
    "agent.forget": ForgetAgent,
    "procedure.changed": ProcedureChanged,
    "plan.changed": PlanChanged,
    "fact.stated": FactStated,
    "memory.rated": MemoryRated,
    "fact.accessed": FactAccessed,
    "deadletter": DeadLetter,
}


def json_schemas() -> dict[str, dict[str, Any]]:
    return {name: model.model_json_schema(mode="validation") for name, model in EXPORTED.items()}


def schema_version_of(name: str) -> int:
    """The version a type is written at: its file is named after it, so a producer validating
    against ``observation.v2.schema.json`` knows which version it writes."""
    version: int = EXPORTED[name].model_fields["schema_version"].default
    return version


def export_json_schemas(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in json_schemas().items():
        path = directory / f"{name}.v{schema_version_of(name)}.schema.json"
        path.write_bytes(orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
        written.append(path)
    return written
