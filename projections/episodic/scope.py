"""What a read of episodic memory may see, and how many candidates a signal brings: named apart
from :mod:`projections.episodic.candidates` so that the settings import them without numpy."""

from __future__ import annotations

from typing import Literal

Scope = Literal["active", "archive", "all"]
"""Which memories a read sees: the active set (what capacity and forgetting left), the archive
(what they took away, kept until the agent is erased: :mod:`projections.episodic.changes`), or
both."""

CANDIDATE_LIMIT = 100
"""How many memories each signal contributes by default: an agent pool of up to this many
(after filters) is ranked exactly as a whole, and a larger one through at most ~4x this."""
