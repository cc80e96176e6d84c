"""What an export that died half way leaves beside its archive, set right by the next
`engram up`: never an archive lost between the two renames of the swap, no leftovers."""

from __future__ import annotations

from pathlib import Path

from streams.eventlog.archive import MANIFEST, recover_interrupted_export


def archive_at(path: Path, run: str, *, complete: bool = True) -> Path:
    (path / "agent.observations").mkdir(parents=True)
    (path / "agent.observations" / "0.jsonl.gz").write_text(run)
    if complete:
        (path / MANIFEST).write_text(run)
    return path


def entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_a_complete_new_archive_left_staged_takes_the_missing_archives_place(
    tmp_path: Path,
) -> None:
    archive_at(tmp_path / ".archive.earlier-1" / "archive", "run 1")
    archive_at(tmp_path / ".archive.partial-2", "run 2")
    done = recover_interrupted_export(tmp_path / "archive")
    assert (tmp_path / "archive" / MANIFEST).read_text() == "run 2"
    assert entries(tmp_path) == ["archive"]
    assert len(done) == 2


def test_the_earlier_archive_comes_back_when_the_new_one_is_incomplete(tmp_path: Path) -> None:
    archive_at(tmp_path / ".archive.earlier-1" / "archive", "run 1")
    archive_at(tmp_path / ".archive.partial-2", "run 2", complete=False)
    recover_interrupted_export(tmp_path / "archive")
    assert (tmp_path / "archive" / MANIFEST).read_text() == "run 1"
    assert entries(tmp_path) == ["archive"]


def test_an_archive_in_place_is_kept_and_the_leftovers_go(tmp_path: Path) -> None:
    archive_at(tmp_path / "archive", "run 3")
    archive_at(tmp_path / ".archive.earlier-1" / "archive", "run 1")
    archive_at(tmp_path / ".archive.partial-2", "run 2")
    (tmp_path / ".other.partial-9").mkdir()  # another directory's export: not ours
    recover_interrupted_export(tmp_path / "archive")
    assert (tmp_path / "archive" / MANIFEST).read_text() == "run 3"
    assert entries(tmp_path) == [".other.partial-9", "archive"]


def test_nothing_to_set_right_says_nothing(tmp_path: Path) -> None:
    assert recover_interrupted_export(tmp_path / "archive") == []
    assert recover_interrupted_export(tmp_path / "absent" / "archive") == []
