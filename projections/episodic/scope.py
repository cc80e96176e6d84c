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

RELEVANCE_CANDIDATE_LIMIT = 50
"""The same for the ``relevance`` mode, whose only signals are the query's (its nearest
embeddings and best keyword matches): at most twice this many candidates, then the turns
beside the best of them.

Lower than :data:`CANDIDATE_LIMIT` because it measured better for this mode. On the
long-conversation benchmark (2,500 turns, every turn kept, asked with a query alone) R@10 was
0.537-0.550 at 50 against 0.530 at 100 with the hashing embedder and 0.785-0.792 against 0.779
with MiniLM (MiniLM's R@20 is the one figure higher at 100: 0.826-0.832 against 0.812), and
over HTTP a read of an agent of 1,000 memories took 5.2 ms at the median against 6.0-6.1. The
other modes keep 100: at 50 the weighted and generative modes' top 10 held less of the whole
pool's (weighted 0.63 of it against 0.99, generative 0.38 against 0.43, agents of 10,000
memories; two_phase held all of it at both). Figures and commands:
tests/benchmarks/README.md, "The relevance mode's candidates halved"."""
