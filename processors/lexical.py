"""Text to sparse lexical vectors: the keyword half of hybrid search.

A memory's text becomes a sparse vector with one entry per distinct word stem: the index is a
stable 32-bit hash of the stem, the value BM25's term-frequency saturation. The stores keep that
vector beside the dense one (a Qdrant sparse vector with the IDF modifier) and, at query time,
multiply each matching entry by the stem's inverse document frequency, so a sparse search scores
``sum over shared stems of idf(stem) * bm25_tf(stem)``: BM25 (Robertson and Zaragoza, "The
Probabilistic Relevance Framework: BM25 and Beyond", 2009) split between write and query time.

Choices, each for question-to-memory relevance in general rather than for any one corpus:

- **Tokens** are runs of Unicode letters and digits of the casefolded text, so names with
  accents and numbers ("2023", "7pm" -> "7pm") survive; an apostrophe splits a word ("Caroline's"
  -> "caroline", "s"), and the fragment is a stopword.
- **Stopwords** are the Snowball English list, plus the pieces contractions split into ("don",
  "t", "ll", ...). Question words ("when", "what", "did") are in it: a question shares them with
  nothing it asks about.
- **Stemming** is the Snowball English (Porter 2) stemmer from PyStemmer, which is C: ~5 us per
  27-token sentence uncached and ~2.6 us with its word cache, against ~470 us for the pure-Python
  ``snowballstemmer`` (measured here), so "flooded", "floods" and "flooding" share "flood".
- **Index** = crc32 of the stem's UTF-8 bytes. Two stems may collide: with a vocabulary of V
  stems a given stem shares its index with another with probability about V / 2**32 (2e-5 for
  100k stems), and the collision only makes those two words count as one, never an error. A
  hash needs no vocabulary, so every process and every replay maps a stem to the same index.
- **Value** = ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len))`` with k1 1.2, b 0.75,
  ``len`` the number of non-stopword tokens. ``avg_len`` is a constant (:data:`AVG_LEN`), not
  the store's running average: Qdrant computes only the IDF at query time, so length
  normalisation is baked into the vector when the memory is written, and a running average would
  make a memory's vector depend on which memories came before it, which a rebuild from the log
  could not reproduce.
- **A query** is every distinct stem of the query text with weight 1.0, the IDF supplied by the
  store (or by :func:`idf` over a candidate pool).
"""

from __future__ import annotations

import functools
import math
import re
import threading
import zlib
from dataclasses import dataclass

import Stemmer

__all__ = [
    "AVG_LEN",
    "K1",
    "STOPWORDS",
    "B",
    "SparseQuery",
    "SparseVector",
    "bm25_weight",
    "document_vector",
    "idf",
    "query_vector",
    "stems",
    "term_index",
]

K1 = 1.2
"""Term-frequency saturation: a word's third mention adds far less than its first."""
B = 0.75
"""How much a long memory's term weights are scaled down (0 none, 1 fully)."""
AVG_LEN = 12.0
"""The assumed average memory length in non-stopword tokens: a dialogue turn or an observation
of one or two sentences (20-30 words) keeps about half its words. Fixed, see the module docstring;
a memory of this length is neither favoured nor penalised."""

TOKEN = re.compile(r"[^\W_]+")

_STOP_LIST = """
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she
her hers herself it its itself they them their theirs themselves what which who whom this that
these those am is are was were be been being have has had having do does did doing would should
could ought a an the and but if or because as until while of at by for with about against
between into through during before after above below to from up down in out on off over under
again further then once here there when where why how all any both each few more most other
some such no nor not only own same so than too very can cannot
s t m d ll re ve isn aren wasn weren hasn haven hadn doesn don didn wouldn shan shouldn couldn
mustn
"""
STOPWORDS = frozenset(_STOP_LIST.split())
"""The Snowball English stop list (snowballstem.org), its contractions as this tokenizer splits
them, and "can"/"cannot"."""

_local = threading.local()


def _stemmer() -> Stemmer.Stemmer:
    """One stemmer per thread: a PyStemmer object must not be used by two threads at once, and
    the stores compute vectors in worker threads while queries are embedded on the event loop."""
    stemmer: Stemmer.Stemmer | None = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer


@dataclass(frozen=True, slots=True)
class SparseVector:
    """Indices (stem hashes, ascending and distinct) and their values."""

    indices: tuple[int, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.indices) != len(self.values):
            raise ValueError(
                f"a sparse vector needs one value per index, got {len(self.indices)} indices "
                f"and {len(self.values)} values"
            )

    def __bool__(self) -> bool:
        return bool(self.indices)


@dataclass(frozen=True, slots=True)
class SparseQuery(SparseVector):
    """A query's sparse vector: each distinct stem once, weight 1.0 (the store applies IDF)."""


def stems(text: str) -> list[str]:
    """The stems of the text's non-stopword tokens, in order, repeats kept."""
    tokens = [t for t in TOKEN.findall(text.casefold()) if t not in STOPWORDS]
    stemmed: list[str] = _stemmer().stemWords(tokens)
    return stemmed


_INDEX_CACHE_LIMIT = 200_000
"""Words whose index a thread remembers; agents repeat their vocabulary, and stemming and
hashing a word is most of what a memory's sparse vector costs."""


def _term_indices(text: str) -> list[int]:
    """``term_index`` of each of the text's stems (as :func:`stems` gives them), memoised
    per word and per thread like the stemmer."""
    tokens = [t for t in TOKEN.findall(text.casefold()) if t not in STOPWORDS]
    cache: dict[str, int] | None = getattr(_local, "indices", None)
    if cache is None or len(cache) > _INDEX_CACHE_LIMIT:
        cache = _local.indices = {}
    missing = [t for t in dict.fromkeys(tokens) if t not in cache]
    if missing:
        for token, stem in zip(missing, _stemmer().stemWords(missing), strict=True):
            cache[token] = term_index(stem)
    return [cache[t] for t in tokens]


def term_index(stem: str) -> int:
    """The sparse index of a stem: crc32, an unsigned 32-bit value as Qdrant's indices are."""
    return zlib.crc32(stem.encode("utf-8"))


def bm25_weight(tf: int, length: int, *, k1: float = K1, b: float = B) -> float:
    """BM25's saturated term frequency of a term seen ``tf`` times in ``length`` tokens."""
    return tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * length / AVG_LEN))


def document_vector(text: str) -> SparseVector:
    """A memory's sparse vector; empty when the text has only stopwords.

    Stems that collide on one index add their counts, as one word would.
    """
    terms = _term_indices(text)
    if not terms:
        return SparseVector((), ())
    counts: dict[int, int] = {}
    for term in terms:
        counts[term] = counts.get(term, 0) + 1
    length = len(terms)
    indices = tuple(sorted(counts))
    return SparseVector(indices, tuple([_document_weight(counts[i], length) for i in indices]))


@functools.lru_cache(maxsize=4096)
def _document_weight(tf: int, length: int) -> float:
    """:func:`bm25_weight` at the default parameters, remembered: memories are short, so a
    few hundred (tf, length) pairs cover nearly all of them, and every memory applied to the
    episodic store computes its weights (a quarter of its sparse vector's cost)."""
    return bm25_weight(tf, length)


def query_vector(text: str) -> SparseQuery:
    """A query's sparse vector: every distinct stem with weight 1.0; empty when the query has
    only stopwords (a store then searches by the dense vector alone)."""
    indices = tuple(sorted({term_index(stem) for stem in stems(text)}))
    return SparseQuery(indices, (1.0,) * len(indices))


def idf(documents: int, containing: int) -> float:
    """Qdrant's IDF modifier: ``ln(1 + (N - n + 0.5) / (n + 0.5))`` for a term in ``n`` of
    ``N`` documents (the BM25 IDF made non-negative); Qdrant Edge and the qdrant-client local
    mode both compute it so, which the episodic contract tests check."""
    if not 0 <= containing <= documents:
        raise ValueError(f"a term cannot be in {containing} of {documents} documents")
    return math.log(1.0 + (documents - containing + 0.5) / (containing + 0.5))
