"""Where a memory goes: episodic when important enough, else working memory.

Threshold 0.7 by default (seed 004, section 2.3: ``importance >= 0.7``).
"""

from __future__ import annotations

from schemas.memory_events import Destination

DEFAULT_EPISODIC_THRESHOLD = 0.7


def destination_for(
    importance: float, threshold: float = DEFAULT_EPISODIC_THRESHOLD
) -> Destination:
    return "episodic" if importance >= threshold else "working"
