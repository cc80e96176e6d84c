"""Sparse lexical vectors: tokens, stems, stable indices and BM25 term weights."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processors.lexical import (
    AVG_LEN,
    K1,
    SparseQuery,
    SparseVector,
    bm25_weight,
    document_vector,
    idf,
    query_vector,
    stems,
    term_index,
)


def test_inflections_share_a_stem() -> None:
    assert stems("flooded") == stems("floods") == stems("Flooding") == ["flood"]
    assert stems("adoption agencies") == stems("adopting agency")


def test_stopwords_and_contraction_pieces_are_dropped() -> None:
    question = "When did she go to the LGBTQ support group?"
    assert stems(question) == ["go", "lgbtq", "support", "group"]
    assert stems("Caroline's dog didn't bark") == ["carolin", "dog", "bark"]
    assert stems("what was it that they were doing") == []


def test_names_with_accents_and_numbers_are_tokens() -> None:
    assert stems("José moved in 2023, at 7pm") == ["josé", "move", "2023", "7pm"]
    assert stems("snake_case") == ["snake", "case"], "an underscore separates words"


def test_term_indices_are_stable_32_bit_hashes() -> None:
    """Pinned values: a changed hash would silently split every stored memory from its queries
    until the store is rebuilt."""
    assert term_index("flood") == 1251042175
    assert term_index("levee") == 3811996855
    assert all(0 <= term_index(s) < 2**32 for s in ["", "a", "josé", "x" * 100])


def test_bm25_weight_saturates_and_normalises_length() -> None:
    assert bm25_weight(1, int(AVG_LEN)) == pytest.approx(1.0), "tf 1 at the average length"
    once, twice, often = bm25_weight(1, 12), bm25_weight(2, 12), bm25_weight(50, 12)
    assert once < twice < 2 * once
    assert often < K1 + 1, "no count lifts a term past k1 + 1"
    assert bm25_weight(1, 3) > bm25_weight(1, 12) > bm25_weight(1, 40), "short texts weigh more"
    expected = 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * 30 / AVG_LEN))
    assert bm25_weight(2, 30) == pytest.approx(expected)


def test_document_vector_counts_repeated_stems_once_with_their_tf() -> None:
    vector = document_vector("The flood came; floods flooded the valley.")
    flood, valley, came = term_index("flood"), term_index("valley"), term_index("came")
    assert vector.indices == tuple(sorted({flood, valley, came}))
    weights = dict(zip(vector.indices, vector.values, strict=True))
    assert weights[flood] == pytest.approx(bm25_weight(3, 5))
    assert weights[valley] == pytest.approx(bm25_weight(1, 5))
    assert weights[came] == weights[valley]


def test_colliding_stems_add_up_as_one_word() -> None:
    """Two distinct stems with one crc32 (found by search) share an index; the vector still
    lists each index once, as a sparse vector must."""
    a, b = "mnzrjqktg", "tcxkvfgkt"
    assert stems(f"{a} {b}") == [a, b]
    assert term_index(a) == term_index(b)

    vector = document_vector(f"{a} {b}")

    assert vector.indices == (term_index(a),)
    assert vector.values == (pytest.approx(bm25_weight(2, 2)),)


def test_query_vector_lists_distinct_stems_with_weight_one() -> None:
    query = query_vector("Flooded? The floods, the levee!")
    assert isinstance(query, SparseQuery)
    assert query.indices == tuple(sorted({term_index("flood"), term_index("leve")}))
    assert query.values == (1.0, 1.0)


def test_stopword_only_texts_give_empty_vectors() -> None:
    assert not query_vector("What did they do?")
    assert not document_vector("and so it was")
    assert document_vector("and so it was").indices == ()
    assert query_vector("levee")


def test_sparse_vector_needs_one_value_per_index() -> None:
    with pytest.raises(ValueError, match="one value per index"):
        SparseVector((1, 2), (1.0,))


def test_idf_is_qdrants_formula() -> None:
    assert idf(4, 1) == pytest.approx(math.log(1 + 3.5 / 1.5))
    assert idf(4, 2) == pytest.approx(math.log(2.0))
    assert idf(10, 1) > idf(10, 5) > idf(10, 10) > 0.0, "rarer is heavier, never negative"
    with pytest.raises(ValueError, match="cannot be in"):
        idf(3, 4)
    with pytest.raises(ValueError, match="cannot be in"):
        idf(3, -1)


@given(st.text(max_size=300))
def test_vectors_are_well_formed_for_any_text(text: str) -> None:
    vector = document_vector(text)
    assert list(vector.indices) == sorted(set(vector.indices))
    assert all(0.0 < v < K1 + 1 for v in vector.values)
    query = query_vector(text)
    assert set(query.indices) == set(vector.indices)


def test_threads_stem_alike() -> None:
    """The stores compute document vectors in worker threads while queries are stemmed on the
    event loop: each thread gets its own stemmer, and all agree."""
    texts = [f"the floods of year {i} flooded the {i % 7} valleys" for i in range(400)]
    expected = [document_vector(t) for t in texts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(document_vector, texts)) == expected


@given(st.lists(st.text(max_size=60), max_size=8))
def test_document_vectors_count_the_stems_whatever_was_seen_before(texts: list[str]) -> None:
    """Word indices are remembered per thread: the vector of a text is still the BM25 of its
    stems' indices, as if computed afresh."""
    for text in texts:
        terms = [term_index(stem) for stem in stems(text)]
        indices = sorted(set(terms))
        expected = tuple(bm25_weight(terms.count(i), len(terms)) for i in indices)
        assert document_vector(text) == SparseVector(tuple(indices), expected)
