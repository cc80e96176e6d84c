import pytest

from projections.episodic.edge_segments import OptimizeCadence


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
