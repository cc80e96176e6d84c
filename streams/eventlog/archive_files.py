"""The files of an archive (:mod:`streams.eventlog.archive`): where each partition's records
are, and each line read back as a record, checked, so a damaged archive is refused in words
(file and line) before anything is written, never imported as less or as a traceback."""

from __future__ import annotations

import base64
import gzip
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from schemas.errors import EngramError

__all__ = [
    "ArchiveError",
    "Line",
    "TopicSummary",
    "archive_file",
    "b64_text",
    "check_files",
    "file_digest",
    "lines_of",
]


class ArchiveError(EngramError, RuntimeError):
    """The archive or the target broker cannot be used; the message says why and what to do."""


@dataclass(frozen=True)
class TopicSummary:
    name: str
    partitions: int
    records: tuple[int, ...]
    """Per partition."""
    sizes: tuple[int, ...] | None = None
    """Bytes of each partition's file (None in an archive written before they were kept)."""
    digests: tuple[str, ...] | None = None
    """SHA-256 of each partition's file, hex (None in an archive written before they were
    kept): a damaged byte that leaves the size as it was is found before writing too."""

    @property
    def total(self) -> int:
        return sum(self.records)


def archive_file(directory: Path, topic: str, partition: int) -> Path:
    return directory / topic / f"{partition}.jsonl.gz"


def b64_text(raw: bytes | None) -> str | None:
    return None if raw is None else base64.b64encode(raw).decode("ascii")


def _raw(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


class Line(NamedTuple):
    """One record of an archive file, checked."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None


def lines_of(directory: Path, topic: str, partition: int) -> Iterator[Line]:
    path = archive_file(directory, topic, partition)
    try:
        with gzip.open(path, "rb") as lines:
            for number, line in enumerate(lines, start=1):
                try:
                    yield _line(orjson.loads(line))
                except (ValueError, TypeError, KeyError) as exc:
                    raise ArchiveError(f"{path}, line {number}: {_what(exc)}") from None
    except (OSError, EOFError) as exc:
        raise ArchiveError(f"cannot read {path}: {exc}") from exc


def _line(data: Any) -> Line:
    """A record as an export writes it, or what is wrong with it (not a traceback)."""
    offset, timestamp = data["offset"], data.get("timestamp")
    if type(offset) is not int or offset < 0:
        raise ValueError(f"offset is not a record's offset: {offset!r:.40}")
    if timestamp is not None and type(timestamp) is not int:
        raise ValueError(f"timestamp is not milliseconds: {timestamp!r:.40}")
    key, value = (data[name] for name in ("key", "value"))
    if not all(part is None or isinstance(part, str) for part in (key, value)):
        raise ValueError("key and value must be base64 text or null")
    return Line(offset, _raw(key), _raw(value), timestamp)


def _what(exc: Exception) -> str:
    if isinstance(exc, TypeError):
        return "not a record (a JSON object with offset, key, value)"
    return f"no {exc} field" if isinstance(exc, KeyError) else str(exc)


def check_files(directory: Path, summaries: Sequence[TopicSummary]) -> None:
    """Every file is as the manifest says, before anything is written: a file cut short was
    imported as less, exit 0, and found out after writing, it would leave the target with part
    of an archive that no --resume gets past. Its size says it at the cost of a stat, and its
    SHA-256 (a read of the compressed bytes in C, ~1 ms a MB here) catches a damaged byte that
    kept the size. An archive that kept neither has its lines counted (a read of every file,
    ~10 us a record), and a line that is no record is named when the import reaches it."""
    for s in summaries:
        for partition, expected in enumerate(s.records):
            path = archive_file(directory, s.name, partition)
            if s.sizes is not None:
                size = path.stat().st_size if path.exists() else 0
                if size != s.sizes[partition]:
                    raise ArchiveError(
                        f"{path} is {size:,} bytes where the archive's manifest says "
                        f"{s.sizes[partition]:,}: the archive is damaged"
                    )
                if s.digests is not None and file_digest(path) != s.digests[partition]:
                    raise ArchiveError(
                        f"{path} is not the file the archive's manifest describes (its SHA-256 "
                        "differs though its size is the same): the archive is damaged"
                    )
                continue
            read = _count_lines(path) if path.exists() else 0
            if read != expected:
                raise ArchiveError(
                    f"{path} holds {read:,} records where the archive's manifest says "
                    f"{expected:,}: the archive is damaged"
                )


def file_digest(path: Path) -> str:
    """The SHA-256 of a file, hex, as an archive's manifest keeps it."""
    try:
        with path.open("rb") as file:
            return hashlib.file_digest(file, "sha256").hexdigest()
    except OSError as exc:
        raise ArchiveError(f"cannot read {path}: {exc}") from exc


def _count_lines(path: Path) -> int:
    try:
        with gzip.open(path, "rb") as lines:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: lines.read(1 << 20), b""))
    except (OSError, EOFError) as exc:
        raise ArchiveError(f"cannot read {path}: {exc}") from exc
