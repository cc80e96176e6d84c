import pytest

from projections.episodic.edge_segments import OPTIMIZE_EVERY, SEGMENT_KB, OptimizeCadence


def test_due_once_the_points_written_reach_the_cadence() -> None:
    cadence = OptimizeCadence(every=100)
    assert not cadence.wrote(60)
    assert not cadence.wrote(39)
    assert cadence.wrote(1)
    assert cadence.wrote(5), "still due until an optimization is recorded"


def test_an_optimization_starts_the_count_again() -> None:
    cadence = OptimizeCadence(every=100)
    assert cadence.wrote(150)
    cadence.optimized()
    assert not cadence.wrote(99)
    assert cadence.wrote(1)


def test_a_cadence_of_zero_never_falls_due() -> None:
    cadence = OptimizeCadence(every=0)
    assert not cadence.wrote(10**9)


def test_a_negative_cadence_is_refused() -> None:
    with pytest.raises(ValueError, match="0 \\(never\\) or more"):
        OptimizeCadence(every=-1)


@pytest.mark.parametrize("bytes_per_value", [2, 4], ids=["float16", "float32"])
def test_one_cadence_of_384_dimension_vectors_is_past_the_segment_bound(
    bytes_per_value: int,
) -> None:
    """What keeps an optimization from merging the segment the one before it built."""
    vectors_kb = OPTIMIZE_EVERY * 384 * bytes_per_value / 1024
    assert vectors_kb > SEGMENT_KB
