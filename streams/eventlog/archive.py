"""Export topics to files and import them into any broker, offsets and all.

The log is the truth, so it must be able to outlive its broker: the dev stack's broker keeps
its log in memory and archives it on the way down, and any deployment can move its log between
clusters. An archive is a directory::

    manifest.json                      format, topics, partition counts, record counts,
                                       file sizes and SHA-256s (an import checks them
                                       before writing)
    <topic>/<partition>.jsonl.gz       one JSON object per record, in offset order:
                                       {"offset", "key", "value", "timestamp"} (key and value
                                       base64, so poison records travel unchanged)

Import writes every record back to its partition in order and checks it lands at the offset it
had: derived events name their source records by offset, so a log whose offsets moved would
no longer match its projections. It therefore refuses topics that already hold records,
unless it resumes an import of the same archive that stopped half way: then each partition goes
on from where the target ends, once the target's last record there is found to be the archive's.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import NewTopic
from aiokafka.errors import KafkaError

from schemas.sealed import SealError, is_sealed, sealed_header
from schemas.topics import TOPIC_NAME, Topics
from streams.eventlog.archive_files import (
    ArchiveError,
    TopicSummary,
    archive_file,
    b64_text,
    check_files,
    file_digest,
    lines_of,
)
from streams.eventlog.derived_log import at_end, read_to_end
from streams.eventlog.kafka_clients import admin_client, archive_producer, log_reader
from streams.eventlog.log_starts import log_starts
from streams.eventlog.topic_admin import ONE_COPY, TopicReplication

FORMAT = 1
MANIFEST = "manifest.json"

Progress = Callable[[int], None]
"""Called with the number of records just handled."""


async def export_log(
    bootstrap: str,
    topics: Sequence[str],
    directory: Path,
    *,
    progress: Progress | None = None,
    sized: Progress | None = None,
    notes: Mapping[str, str] | None = None,
) -> list[TopicSummary]:
    """Write ``topics`` (those that exist) to ``directory`` as they are when reading starts;
    ``notes`` go into the manifest (:func:`archive_notes`) for whoever imports it; ``sized``
    is told the records the broker reports before any is read (a bar's total).

    Written into a sibling temporary directory and renamed at the end, so an interrupted export
    never leaves a half archive where a whole one was. ``directory`` may be new, empty, or an
    archive, which is replaced; anything else is refused before the log is read.
    """
    check_export_target(directory)
    staging = _fresh_staging(directory)
    try:
        summaries = await _export_into(bootstrap, topics, staging, progress, sized)
        _finish(staging, directory, summaries, notes or {})
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return summaries


def recover_interrupted_export(directory: Path) -> list[str]:
    """What an export to ``directory`` that died half way left beside it, set right; only for
    the one process that exports there (`engram up`, under its data-directory lock), since a
    running export's directories look the same. An archive missing between the two renames of
    the swap is put back: the new one if its staging directory is complete (the manifest is
    written last), else the earlier one moved aside. Then the leftovers are deleted. Says
    what it did."""
    parent, name = directory.parent, directory.name
    if not parent.is_dir():
        return []
    done: list[str] = []
    staged = sorted(parent.glob(f".{name}.partial-*"), key=lambda p: p.stat().st_mtime)
    earlier = sorted(parent.glob(f".{name}.earlier-*"), key=lambda p: p.stat().st_mtime)
    if not directory.exists():
        complete = [s for s in staged if (s / MANIFEST).is_file()]
        kept = [e / name for e in earlier if (e / name / MANIFEST).is_file()]
        if complete or kept:
            source = (complete or kept)[-1]
            os.replace(source, directory)
            done.append(f"put back the archive an interrupted export left in {source}")
    for leftover in [*staged, *earlier]:
        if leftover.exists():
            shutil.rmtree(leftover, ignore_errors=True)
            done.append(f"deleted {leftover}, left by an interrupted export")
    return done


async def _export_into(
    bootstrap: str,
    topics: Sequence[str],
    staging: Path,
    progress: Progress | None,
    sized: Progress | None,
) -> list[TopicSummary]:
    consumer = log_reader(bootstrap)
    summaries: list[TopicSummary] = []
    try:
        await consumer.start()
        existing = await consumer.topics()
        # Read the layout before assigning anything: an assigned consumer narrows its metadata
        # to the assigned topics.
        layout = {
            topic: sorted(consumer.partitions_for_topic(topic) or ())
            for topic in topics
            if topic in existing
        }
        # Where every partition begins and ends, in two requests before any is assigned: asked
        # per partition, with a fetch in flight, each answer waited out the fetch (~50 ms on
        # Tansu), and an empty stack took ~3.3 s to archive its 32 partitions.
        tps = [TopicPartition(t, p) for t, partitions in layout.items() for p in partitions]
        # Where each partition starts as read, not as reported: Tansu may report a start past
        # the first batch, which an export would then leave out (log_starts).
        begins = await log_starts(consumer, tps)
        ends = await consumer.end_offsets(tps) if tps else {}
        if sized is not None:
            sized(sum(ends[tp] - begins[tp] for tp in tps))
        for topic, partitions in layout.items():
            (staging / topic).mkdir()
            counts = []
            for partition in partitions:
                tp = TopicPartition(topic, partition)
                counts.append(
                    await _export_partition(consumer, tp, (begins[tp], ends[tp]), staging, progress)
                )
            files = [archive_file(staging, topic, p) for p in partitions]
            sizes = tuple(file.stat().st_size for file in files)
            digests = tuple(map(file_digest, files))
            summaries.append(TopicSummary(topic, len(partitions), tuple(counts), sizes, digests))
    except KafkaError as exc:
        raise ArchiveError(f"cannot read the log at {bootstrap}: {exc}") from exc
    finally:
        await consumer.stop()
    return summaries


def check_export_target(directory: Path) -> None:
    """An export replaces an archive, never anything else: the path a user names may be a
    directory of their own, which the swap at the end would delete."""
    if not directory.exists():
        return
    if directory.is_dir():
        entries = list(directory.iterdir())
        if not entries or _only_an_archive(entries):
            return
    raise ArchiveError(
        f"{directory} exists and is not an Engram archive: export into a new or empty "
        "directory (an existing archive there is replaced)"
    )


def _only_an_archive(entries: list[Path]) -> bool:
    """What an export writes and nothing else: a manifest and directories of partition files.
    Judged by shape, not by reading the manifest, so a damaged archive (which `engram up
    --fresh` would otherwise fail to replace on its way down, losing its log) is replaced."""
    return any(entry.name == MANIFEST for entry in entries) and all(
        entry.is_file()
        if entry.name == MANIFEST
        else entry.is_dir() and all(f.name.endswith(".jsonl.gz") for f in entry.iterdir())
        for entry in entries
    )


def _fresh_staging(directory: Path) -> Path:
    """A new sibling of ``directory`` (same file system, so the swap is a rename), named for
    this export alone: nothing already there is reused or deleted."""
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{directory.name}.partial-", dir=directory.parent))
    except OSError as exc:
        raise ArchiveError(f"cannot write an archive at {directory}: {exc}") from None


def _finish(
    staging: Path, directory: Path, summaries: Sequence[TopicSummary], notes: Mapping[str, str]
) -> None:
    """Write the manifest last and swap the archive in whole."""
    manifest = {
        "format": FORMAT,
        "exported_at": datetime.now(UTC).isoformat(),
        "topics": [
            {
                "name": s.name,
                "partitions": s.partitions,
                "records": list(s.records),
                **({"bytes": list(s.sizes)} if s.sizes is not None else {}),
                **({"sha256": list(s.digests)} if s.digests is not None else {}),
            }
            for s in summaries
        ],
        "notes": dict(notes),
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2))
    # The earlier archive is moved aside before the new one takes its place, and deleted only
    # then: a process that dies between the two steps leaves both archives, not neither.
    earlier = None
    if directory.exists():
        earlier = Path(tempfile.mkdtemp(prefix=f".{directory.name}.earlier-", dir=directory.parent))
        os.replace(directory, earlier / directory.name)
    os.replace(staging, directory)
    if earlier is not None:
        shutil.rmtree(earlier, ignore_errors=True)


async def _export_partition(
    consumer: Any,
    tp: TopicPartition,
    offsets: tuple[int, int],
    directory: Path,
    progress: Progress | None,
) -> int:
    """``offsets``: where the partition began and ended when the export started."""
    begin, end = offsets
    count = 0
    # Level 1: a record's value is mostly sealed (encrypted) bytes in base64, which gzip shrinks
    # by the same ~36% at any level; level 9 (gzip's default) took 3.7 s of a 4.9-s export of
    # 60,000 derived records, level 1 2.3 s for an archive 0.5% larger.
    with gzip.open(archive_file(directory, tp.topic, tp.partition), "wb", compresslevel=1) as out:
        if end == 0:  # an end of 0 is exact: the partition is empty
            return count
        consumer.assign([tp])
        consumer.seek(tp, begin)
        first_highwater: int | None = None
        while True:
            batch = await consumer.getmany(tp, timeout_ms=300, max_records=10_000)
            records = batch.get(tp, [])
            for record in records:
                line = {
                    "offset": record.offset,
                    "key": b64_text(record.key),
                    "value": b64_text(record.value),
                    "timestamp": record.timestamp,
                }
                out.write(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))
            count += len(records)
            if progress is not None and records:
                progress(len(records))
            if first_highwater is None:
                first_highwater = consumer.highwater(tp)
            if at_end(await consumer.position(tp), end, first_highwater):
                break
    return count


def read_manifest(directory: Path) -> list[TopicSummary]:
    data = _manifest(directory)
    try:
        summaries = [
            TopicSummary(
                t["name"],
                int(t["partitions"]),
                tuple(int(n) for n in t["records"]),
                tuple(int(n) for n in t["bytes"]) if "bytes" in t else None,
                tuple(map(_digest, t["sha256"])) if "sha256" in t else None,
            )
            for t in data["topics"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise ArchiveError(f"{directory / MANIFEST} is damaged: {exc!r}") from None
    for s in summaries:  # a name is a directory of the archive, never a path out of it
        if not TOPIC_NAME.fullmatch(s.name) or s.name in (".", ".."):
            raise ArchiveError(f"{directory / MANIFEST} is damaged: {s.name!r} is no topic")
        counts = (
            len(s.records),
            s.partitions if s.sizes is None else len(s.sizes),
            s.partitions if s.digests is None else len(s.digests),
        )
        if s.partitions < 1 or counts != (s.partitions,) * 3 or (s.digests and not s.sizes):
            raise ArchiveError(f"{directory / MANIFEST} is damaged: {s.name}'s partitions")
    return summaries


def _digest(value: Any) -> str:
    if not isinstance(value, str) or not SHA256_HEX.fullmatch(value):
        raise ValueError(f"{value!r:.80} is no SHA-256")
    return value


SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def topic_prefix_of(summaries: Sequence[TopicSummary]) -> str | None:
    """The ``ENGRAM_TOPIC_PREFIX`` an archive's topics were written under (each is an Engram
    topic's name after it), or None if they do not all tell the same one."""
    bases = Topics().all()
    prefixes = {
        next((s.name[: -len(base)] for base in bases if s.name.endswith(base)), None)
        for s in summaries
    }
    if len(prefixes) != 1:
        return None
    return prefixes.pop()


def archive_notes(directory: Path) -> dict[str, str]:
    """The notes an export put in the archive's manifest (none in an archive without)."""
    notes = _manifest(directory).get("notes") or {}
    if not isinstance(notes, dict):
        raise ArchiveError(f"{directory / MANIFEST} is damaged: its notes are not a mapping")
    return {str(key): str(value) for key, value in notes.items()}


def _manifest(directory: Path) -> dict[str, Any]:
    """The manifest of an archive of this format, or a clear error."""
    try:
        data = json.loads((directory / MANIFEST).read_text())
    except (FileNotFoundError, NotADirectoryError):
        raise ArchiveError(f"{directory} is not an Engram archive (no {MANIFEST})") from None
    except OSError as exc:
        raise ArchiveError(f"cannot read {directory / MANIFEST}: {exc}") from None
    except ValueError as exc:
        raise ArchiveError(f"{directory / MANIFEST} is damaged: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else None
        raise ArchiveError(f"{directory} has archive format {found!r}; this Engram reads {FORMAT}")
    return data


def sealing_keys(directory: Path, per_partition: int = 2_000) -> set[tuple[str, str]]:
    """The (agent id, key id) pairs that sealed the first ``per_partition`` records of each
    partition of an archive: what a keyring must hold for the imported log to be readable (a
    sample: an archive moved without its keyring lacks them all)."""
    pairs: set[tuple[str, str]] = set()
    for summary in read_manifest(directory):
        for partition in range(summary.partitions):
            if not archive_file(directory, summary.name, partition).exists():
                continue
            lines = lines_of(directory, summary.name, partition)
            for line in itertools.islice(lines, per_partition):
                value = line.value
                if value is None or not is_sealed(value):
                    continue
                try:
                    header = sealed_header(value)
                except SealError:
                    continue  # a poison record: the workers dead-letter it
                pairs.add((header.agent_id, header.key_id))
    return pairs


async def import_log(
    bootstrap: str,
    directory: Path,
    *,
    progress: Progress | None = None,
    replication: TopicReplication = ONE_COPY,
    resume: bool = False,
    present: Progress | None = None,
) -> list[TopicSummary]:
    """Load an archive into empty topics, record by record at the offsets it had; topics it
    creates get ``replication``.

    With ``resume``, topics that hold records are taken for an earlier import of this archive
    that stopped: every partition is checked first (its records are no more than the archive's,
    and its last one is the archive's record at that offset), then goes on from its end.
    ``present`` is told how many records each partition held already; ``progress`` counts
    them too, so a bar sized by the manifest ends full."""
    summaries = read_manifest(directory)
    check_files(directory, summaries)
    reported, missing = await _check_topics(bootstrap, summaries, replication, resume=resume)
    starts = await _resume_points(bootstrap, directory, reported)
    await _create_topics(bootstrap, missing)  # once nothing was refused
    for start in starts.values():
        if present is not None:
            present(start)
        if progress is not None:
            progress(start)
    producer = archive_producer(bootstrap)
    try:
        await producer.start()
        for summary in summaries:
            for partition in range(summary.partitions):
                start = starts.get(TopicPartition(summary.name, partition), 0)
                await _import_partition(
                    producer, directory, summary.name, partition, progress, start
                )
    except KafkaError as exc:
        raise ArchiveError(f"cannot write the log to {bootstrap}: {exc}") from exc
    finally:
        await producer.stop()
    return summaries


async def _resume_points(
    bootstrap: str, directory: Path, reported: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Where each partition that holds records ends, exactly (the reported end may fall short
    on Tansu, :func:`~streams.eventlog.derived_log.at_end`), once its last record is found to
    be the archive's record at that offset: the import goes on from there. All are checked
    before anything is written."""
    held = {tp: end for tp, end in reported.items() if end > 0}
    if not held:
        return {}
    last: dict[TopicPartition, ConsumerRecord[Any, Any]] = {}

    def keep(tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> None:
        last[tp] = record

    try:
        ends = await read_to_end(
            bootstrap, sorted(held), keep, starts={tp: end - 1 for tp, end in held.items()}
        )
    except KafkaError as exc:
        raise ArchiveError(f"cannot read the log at {bootstrap}: {exc}") from exc
    for tp, end in sorted(ends.items()):
        record = last.get(tp)
        if record is None or record.offset != end - 1:
            raise ArchiveError(f"{tp.topic}[{tp.partition}]: cannot read its last record")
        _check_same_record(directory, tp, record)
    return ends


def _check_same_record(
    directory: Path, tp: TopicPartition, record: ConsumerRecord[Any, Any]
) -> None:
    """The target's record is the archive's at its offset, or the target holds another log."""
    for line in lines_of(directory, tp.topic, tp.partition):
        offset = line.offset
        if offset < record.offset:
            continue
        if offset == record.offset and (line.key == record.key and line.value == record.value):
            return
        break
    raise ArchiveError(
        f"{tp.topic}[{tp.partition}] on the target holds records this archive does not (its "
        f"record at offset {record.offset} is not the archive's): it is not an earlier "
        "import of this archive; import into a broker without these topics (or with them "
        "empty), or delete them first"
    )


async def _import_partition(
    producer: AIOKafkaProducer,
    directory: Path,
    topic: str,
    partition: int,
    progress: Progress | None,
    start: int = 0,
) -> None:
    """The archive's records of one partition from offset ``start`` (what the target holds
    already is skipped)."""
    pending: list[tuple[int, Any]] = []

    async def settle() -> None:
        for expected, delivery in pending:
            landed = (await delivery).offset
            if landed != expected:
                raise ArchiveError(
                    f"{topic}[{partition}]: a record of offset {expected} landed at {landed}; "
                    "the archive has gaps the target broker cannot reproduce"
                )
        if progress is not None and pending:
            progress(len(pending))
        pending.clear()

    for line in lines_of(directory, topic, partition):
        if line.offset < start:
            continue
        delivery = await producer.send(
            topic,
            value=line.value,
            key=line.key,
            partition=partition,
            timestamp_ms=line.timestamp,
        )
        pending.append((line.offset, delivery))
        if len(pending) >= 5_000:
            await settle()
    await settle()


async def _check_topics(
    bootstrap: str,
    summaries: Sequence[TopicSummary],
    replication: TopicReplication,
    *,
    resume: bool,
) -> tuple[dict[TopicPartition, int], list[NewTopic]]:
    """Refuse the archive's topics that exist laid out otherwise, and (unless ``resume``)
    those that hold records; returns the reported end of every existing one's partitions, and
    the topics to create."""
    admin = admin_client(bootstrap)
    ends: dict[TopicPartition, int] = {}
    try:
        await admin.start()
        existing = set(await admin.list_topics())
        present = [s for s in summaries if s.name in existing]
        if present:
            consumer = log_reader(bootstrap)
            try:
                await consumer.start()
                await consumer.topics()
                wrong = {
                    s.name: len(consumer.partitions_for_topic(s.name) or ())
                    for s in present
                    if len(consumer.partitions_for_topic(s.name) or ()) != s.partitions
                }
                if wrong:
                    raise ArchiveError(
                        f"topics exist on the target with other partition counts: {wrong}"
                    )
                tps = [TopicPartition(s.name, p) for s in present for p in range(s.partitions)]
                ends = await consumer.end_offsets(tps)
            finally:
                await consumer.stop()
            full = sorted({tp.topic for tp, end in ends.items() if end > 0})
            if full and not resume:
                raise ArchiveError(
                    f"the target already holds records in {', '.join(full)}: import into a "
                    "broker without these topics (or with them empty), or delete them first; "
                    "added to them, the records' offsets would shift. If an earlier import of "
                    "this archive stopped half way, resume it (`engram import --resume`)"
                )
    except KafkaError as exc:
        raise ArchiveError(f"cannot prepare topics on {bootstrap}: {exc}") from exc
    finally:
        await admin.close()
    missing = [
        replication.new_topic(s.name, s.partitions) for s in summaries if s.name not in existing
    ]
    return ends, missing


async def _create_topics(bootstrap: str, topics: list[NewTopic]) -> None:
    if not topics:
        return
    admin = admin_client(bootstrap)
    try:
        await admin.start()
        await admin.create_topics(topics)
    except KafkaError as exc:
        raise ArchiveError(f"cannot create topics on {bootstrap}: {exc}") from exc
    finally:
        await admin.close()
