"""Which directory a process that does not hold the Edge shards builds and drops versions in."""

from __future__ import annotations

from pathlib import Path

import pytest

from projections.episodic.edge_location import EdgeLocationError, edge_dir_for


def test_the_recorded_directory_wins_over_the_default(tmp_path: Path) -> None:
    recorded = tmp_path / "stack" / "qdrant-edge"
    assert edge_dir_for(None, recorded, tmp_path / "qdrant-edge") == recorded


def test_without_a_record_the_configured_directory_else_the_default(tmp_path: Path) -> None:
    assert edge_dir_for(tmp_path / "mine", None, tmp_path / "default") == tmp_path / "mine"
    assert edge_dir_for(None, None, tmp_path / "default") == tmp_path / "default"


def test_a_configured_directory_that_is_the_recorded_one_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    recorded = (tmp_path / "edge").resolve()
    assert edge_dir_for(Path("edge"), recorded, tmp_path / "default") == recorded


def test_a_configured_directory_that_is_not_the_recorded_one_fails(tmp_path: Path) -> None:
    recorded = tmp_path / "stack" / "qdrant-edge"
    with pytest.raises(EdgeLocationError, match="unset ENGRAM_QDRANT_PATH"):
        edge_dir_for(tmp_path / "elsewhere", recorded, tmp_path / "default")
