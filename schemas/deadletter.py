"""The dead-letter record: the original bytes and the reason, so nothing is lost."""

from __future__ import annotations

import base64
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field


class DeadLetter(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = 1
    event_type: Literal["deadletter"] = "deadletter"
    reason: str
    error_kind: str = Field(
        description="not_json, invalid, unknown_event_type, future_version, ..."
    )
    topic: str
    partition: int
    offset: int
    key_b64: str | None = None
    value_b64: str
    failed_at: AwareDatetime

    @staticmethod
    def b64(raw: bytes | None) -> str | None:
        return None if raw is None else base64.b64encode(raw).decode("ascii")

    def original_value(self) -> bytes:
        return base64.b64decode(self.value_b64)
