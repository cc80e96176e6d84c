"""A log exported from one broker and imported into another is the same log, offsets and all."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from schemas.topics import Topics
from streams.eventlog.archive import archive_notes, export_log, import_log, read_manifest
from streams.eventlog.archive_files import ArchiveError
from streams.eventlog.kafka_clients import log_reader
from streams.eventlog.topic_admin import ensure_topics
from streams.runtime.devstack.broker import TansuBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

Record = tuple[str, int, int, bytes | None, bytes | None]


@pytest.fixture(scope="module")
def second_broker() -> Iterator[str]:
    with TansuBroker() as broker:
        yield broker.bootstrap


def entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


async def everything(bootstrap: str, topics: list[str], partitions: int) -> list[Record]:
    from aiokafka import TopicPartition

    from streams.eventlog.derived_log import at_end

    consumer = log_reader(bootstrap)
    await consumer.start()
    out: list[Record] = []
    try:
        for topic in topics:
            for partition in range(partitions):
                tp = TopicPartition(topic, partition)
                consumer.assign([tp])
                await consumer.seek_to_beginning(tp)
                end = (await consumer.end_offsets([tp]))[tp]
                highwater = None
                while end:
                    records = (await consumer.getmany(tp, timeout_ms=300)).get(tp, [])
                    out.extend((topic, partition, r.offset, r.key, r.value) for r in records)
                    highwater = highwater if highwater is not None else consumer.highwater(tp)
                    if at_end(await consumer.position(tp), end, highwater):
                        break
    finally:
        await consumer.stop()
    return out


async def three_observations(bootstrap: str, name: str, *, item: bool = False) -> Topics:
    """Topics of a new prefix (one partition) holding three observations of A1, and with
    ``item`` one record on memory.items."""
    topics = Topics(f"{name}{uuid.uuid4().hex[:8]}.")
    await ensure_topics(bootstrap, topics, 1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(3):
            await producer.send(topics.observations, f'{{"n": {i}}}'.encode(), key=b"A1")
        if item:
            await producer.send(topics.items, b'{"x": 1}', key=b"A1")
        await producer.flush()
    finally:
        await producer.stop()
    return topics


async def test_export_then_import_reproduces_every_record_at_its_offset(
    kafka_bootstrap: str, second_broker: str, tmp_path: Path
) -> None:
    topics = Topics(f"arch{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, 2)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(300):
            await producer.send(
                topics.observations, f'{{"n": {i}}}'.encode(), key=f"A{i % 7}".encode()
            )
        await producer.send(topics.observations, b"\xff\xfe not json", key=b"A1", partition=1)
        await producer.send(topics.items, b'{"x": 1}', key=None, partition=0)
        await producer.send(topics.deadletter, None, key=b"gone", partition=1)
        await producer.flush()
    finally:
        await producer.stop()
    names = list(topics.all())
    before = await everything(kafka_bootstrap, names, 2)
    assert len(before) == 303

    seen: list[int] = []
    sized: list[int] = []  # the bar's total, known before a record is read (its ETA)
    exported = await export_log(
        kafka_bootstrap, names, tmp_path / "archive", progress=seen.append, sized=sized.append
    )
    assert sum(seen) == 303
    # The ends the broker reports: exact on Kafka, a floor on Tansu (the bar grows past it).
    assert len(sized) == 1
    assert 0 < sized[0] <= 303
    assert {s.name: s.total for s in exported if s.total} == {
        topics.observations: 301,
        topics.items: 1,
        topics.deadletter: 1,
    }
    assert read_manifest(tmp_path / "archive") == exported
    assert entries(tmp_path) == ["archive"], "the staging directory is left"

    imported = await import_log(second_broker, tmp_path / "archive")
    assert imported == exported
    assert await everything(second_broker, names, 2) == before

    with pytest.raises(ArchiveError, match="already holds records"):
        await import_log(second_broker, tmp_path / "archive")


def cut_short(archive: Path, into: Path, keep: dict[str, int]) -> None:
    """A copy of ``archive`` that holds only the first ``keep[topic]`` records of each of the
    topic's partitions: what an import stopped half way had written."""
    import gzip
    import json
    import shutil

    shutil.copytree(archive, into)
    manifest = json.loads((into / "manifest.json").read_text())
    for topic in manifest["topics"]:
        kept = []
        for partition in range(topic["partitions"]):
            path = into / topic["name"] / f"{partition}.jsonl.gz"
            with gzip.open(path, "rb") as lines:
                first = lines.read().splitlines(keepends=True)[: keep.get(topic["name"], 0)]
            with gzip.open(path, "wb") as out:
                out.write(b"".join(first))
            kept.append(len(first))
        topic["records"] = kept
    (into / "manifest.json").write_text(json.dumps(manifest))
    resized(into)


def resized(archive: Path) -> None:
    """The manifest's file sizes and digests made those of its files: the archive of another
    log, whole, rather than a damaged one."""
    import json

    manifest = json.loads((archive / "manifest.json").read_text())
    for topic in manifest["topics"]:
        files = [archive / topic["name"] / f"{p}.jsonl.gz" for p in range(topic["partitions"])]
        topic["bytes"] = [f.stat().st_size for f in files]
        topic["sha256"] = [hashlib.sha256(f.read_bytes()).hexdigest() for f in files]
    (archive / "manifest.json").write_text(json.dumps(manifest))


async def test_an_import_stopped_half_way_is_resumed_and_nothing_else_is(
    kafka_bootstrap: str, second_broker: str, tmp_path: Path
) -> None:
    """A stopped import left the target holding part of the archive, and every import after
    it was refused ("already holds records"): the log could only go to another broker."""
    import gzip

    topics = Topics(f"archres{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, 2)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(200):
            await producer.send(topics.observations, f'{{"n": {i}}}'.encode(), key=f"A{i}".encode())
        await producer.send(topics.items, b'{"x": 1}', key=None, partition=1)
        await producer.flush()
    finally:
        await producer.stop()
    names = list(topics.all())
    before = await everything(kafka_bootstrap, names, 2)
    archive = tmp_path / "archive"
    await export_log(kafka_bootstrap, names, archive)
    half = tmp_path / "half"
    cut_short(archive, half, {topics.observations: 40})  # memory.items not begun
    await import_log(second_broker, half)

    with pytest.raises(ArchiveError, match=r"already holds records.*engram import --resume"):
        await import_log(second_broker, archive)
    present: list[int] = []
    done: list[int] = []
    await import_log(
        second_broker, archive, resume=True, present=present.append, progress=done.append
    )
    assert sum(present) == 80
    assert sum(done) == len(before), "the bar counts what was there already"
    assert await everything(second_broker, names, 2) == before

    # Resumed again, there is nothing to write.
    present.clear()
    await import_log(second_broker, archive, resume=True, present=present.append)
    assert sum(present) == len(before)
    assert await everything(second_broker, names, 2) == before

    # Another archive of the same topics is refused before anything is written: its record
    # at the target's last offset differs.
    other = tmp_path / "other"
    cut_short(archive, other, {topics.observations: 1_000, topics.items: 1_000})
    part = other / topics.observations / "1.jsonl.gz"
    with gzip.open(part, "rb") as lines:
        *head, last = lines.read().splitlines(keepends=True)
    with gzip.open(part, "wb") as out:
        out.write(b"".join(head) + last.replace(b'"value":"', b'"value":"AAAA'))
    resized(other)
    with pytest.raises(ArchiveError, match=r"observations\[1\] on the target holds records"):
        await import_log(second_broker, other, resume=True)
    # And so is an archive shorter than what the target holds.
    with pytest.raises(ArchiveError, match="holds records this archive does not"):
        await import_log(second_broker, half, resume=True)
    assert await everything(second_broker, names, 2) == before


async def test_a_directory_that_is_not_an_archive_is_named(tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match="not an Engram archive"):
        await import_log("127.0.0.1:1", tmp_path)
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(ArchiveError, match="not an Engram archive"):
        await import_log("127.0.0.1:1", tmp_path / "a-file")


async def test_an_export_replaces_an_archive_and_nothing_else(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The archive is swapped in whole at the end, deleting what stood at the path: a user's
    own directory there (`engram export ~/notes`) must be refused, not deleted."""
    topics = Topics(f"archswap{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, 1)
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "keep.txt").write_text("keep me")
    (tmp_path / "a-file").write_text("keep me too")
    web = tmp_path / "web"  # a manifest.json of another kind, beside other files
    web.mkdir()
    (web / "manifest.json").write_text('{"format": 1, "topics": []}')
    (web / "index.html").write_text("keep me three")
    for taken in (mine, tmp_path / "a-file", web):
        with pytest.raises(ArchiveError, match="exists and is not an Engram archive"):
            await export_log(kafka_bootstrap, [topics.observations], taken)
    assert (mine / "keep.txt").read_text() == "keep me"
    assert (tmp_path / "a-file").read_text() == "keep me too"

    archive = tmp_path / "archive"
    first = await export_log(kafka_bootstrap, [topics.observations], archive)
    assert sum(s.total for s in first) == 0
    assert archive_notes(archive) == {}
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topics.observations, b'{"n": 1}', key=b"A1")
    finally:
        await producer.stop()
    (archive / "manifest.json").write_text("{damaged")
    second = await export_log(
        kafka_bootstrap, [topics.observations], archive, notes={"live_embedder": "hashing-v1-384"}
    )
    assert archive_notes(archive) == {"live_embedder": "hashing-v1-384"}
    assert sum(s.total for s in second) == 1
    assert read_manifest(archive) == second
    assert (web / "index.html").read_text() == "keep me three"
    assert entries(tmp_path) == ["a-file", "archive", "notes", "web"]


def test_the_command_line_exports_and_imports_with_a_clear_refusal(
    kafka_bootstrap: str, second_broker: str, tmp_path: Path
) -> None:
    import asyncio

    from typer.testing import CliRunner

    from streams.cli.main import app as cli

    prefix = f"archcli{uuid.uuid4().hex[:8]}."
    asyncio.run(ensure_topics(kafka_bootstrap, Topics(prefix), 2))
    env = {"ENGRAM_KAFKA_BOOTSTRAP": kafka_bootstrap, "ENGRAM_TOPIC_PREFIX": prefix}
    runner = CliRunner()
    published = runner.invoke(cli, ["publish", "H001", "Year 1: a flood"], env=env)
    assert published.exit_code == 0, published.output
    exported = runner.invoke(cli, ["export", str(tmp_path / "a")], env=env)
    assert exported.exit_code == 0, exported.output
    assert "exported 1 records" in exported.stdout
    target = {**env, "ENGRAM_KAFKA_BOOTSTRAP": second_broker}
    # Under another prefix the deployment would never read what it imported.
    elsewhere = {**target, "ENGRAM_TOPIC_PREFIX": "other."}
    misplaced = runner.invoke(cli, ["import", str(tmp_path / "a")], env=elsewhere)
    assert misplaced.exit_code == 2, misplaced.output
    assert f"import with ENGRAM_TOPIC_PREFIX={prefix!r}" in " ".join(misplaced.output.split())
    imported = runner.invoke(cli, ["import", str(tmp_path / "a")], env=target)
    assert imported.exit_code == 0, imported.output
    assert "imported 1 records" in imported.stdout
    again = runner.invoke(cli, ["import", str(tmp_path / "a")], env=target)
    assert again.exit_code == 2
    assert "already holds records" in again.output
    assert "Traceback" not in again.output
    resumed = runner.invoke(cli, ["import", "--resume", str(tmp_path / "a")], env=target)
    assert resumed.exit_code == 0, resumed.output
    assert "1 of them were there already" in resumed.stdout


def without_sizes(archive: Path) -> None:
    """The archive as written before its manifest kept each file's size and digest."""
    import json

    manifest = json.loads((archive / "manifest.json").read_text())
    for topic in manifest["topics"]:
        del topic["bytes"], topic["sha256"]
    (archive / "manifest.json").write_text(json.dumps(manifest))


def replaced(line: bytes) -> Callable[[bytes], bytes]:
    return lambda _: line


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda second: second[: len(second) // 2], "line 2: "),  # not JSON any more
        (replaced(b'{"key": null, "value": null}'), "line 2: no 'offset' field"),
        (replaced(b"[1, 2]"), "line 2: not a record"),
        (replaced(b'{"offset": null, "key": null, "value": null}'), "line 2: offset is not"),
        (replaced(b'{"offset": 1, "key": null, "value": "abc"}'), "line 2: Incorrect padding"),
        (
            replaced(b'{"offset": 1, "key": null, "value": null, "timestamp": "x"}'),
            "line 2: timestamp is",
        ),
        (replaced(b'{"offset": 1, "key": 7, "value": null}'), "line 2: key and value must be"),
    ],
    ids=["cut", "no-offset", "array", "null-offset", "bad-base64", "bad-timestamp", "int-key"],
)
async def test_a_damaged_line_is_named_by_file_and_line(
    kafka_bootstrap: str,
    second_broker: str,
    tmp_path: Path,
    damage: Callable[[bytes], bytes],
    said: str,
) -> None:
    """Lines that are no record were a traceback deep in the import (KeyError, TypeError)."""
    import gzip

    topics = await three_observations(kafka_bootstrap, "archbad")
    archive = tmp_path / "archive"
    await export_log(kafka_bootstrap, [topics.observations], archive)
    part = archive / topics.observations / "0.jsonl.gz"
    with gzip.open(part, "rb") as lines:
        first, second, third = lines.read().splitlines(keepends=True)
    with gzip.open(part, "wb") as out:
        out.write(first + damage(second.rstrip(b"\n")) + b"\n" + third)
    without_sizes(archive)  # else the file's size gives it away first
    with pytest.raises(ArchiveError, match=re.escape(f"0.jsonl.gz, {said}")):
        await import_log(second_broker, archive)


async def test_a_file_cut_short_is_refused_not_imported_as_less(
    kafka_bootstrap: str, second_broker: str, tmp_path: Path
) -> None:
    """The manifest's counts were never checked: an import of a file missing its last records
    loaded fewer and reported the manifest's numbers, exit 0. Refused before anything is
    written (by the file's size, or in an archive that kept none by its lines), so the whole
    archive imports afterwards without --resume."""
    import gzip
    import shutil

    topics = await three_observations(kafka_bootstrap, "archshort")
    archive, damaged = tmp_path / "archive", tmp_path / "damaged"
    await export_log(kafka_bootstrap, [topics.observations], archive)
    shutil.copytree(archive, damaged)
    part = damaged / topics.observations / "0.jsonl.gz"
    with gzip.open(part, "rb") as lines:
        kept = lines.read().splitlines(keepends=True)[:2]
    with gzip.open(part, "wb") as out:
        out.write(b"".join(kept))
    with pytest.raises(ArchiveError, match=r"bytes where the archive's manifest says .* damaged"):
        await import_log(second_broker, damaged)
    without_sizes(damaged)
    with pytest.raises(ArchiveError, match="holds 2 records where the archive's manifest says 3"):
        await import_log(second_broker, damaged)
    assert [s.total for s in await import_log(second_broker, archive)] == [3]


async def test_a_damaged_byte_that_keeps_the_size_is_refused_before_writing(
    kafka_bootstrap: str, second_broker: str, tmp_path: Path
) -> None:
    """A file damaged in place, its size unchanged, passed the size check: the import wrote
    the records before the damage, then stopped at it, and no --resume got past it. Its
    SHA-256 refuses it before anything is written, so the whole archive imports afterwards."""
    import shutil

    topics = await three_observations(kafka_bootstrap, "archbyte")
    archive, damaged = tmp_path / "archive", tmp_path / "damaged"
    await export_log(kafka_bootstrap, [topics.observations], archive)
    manifest = json.loads((archive / "manifest.json").read_text())
    assert [len(t["sha256"]) for t in manifest["topics"]] == [1]
    shutil.copytree(archive, damaged)
    part = damaged / topics.observations / "0.jsonl.gz"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(ArchiveError, match="its SHA-256 differs though its size is the same"):
        await import_log(second_broker, damaged)
    assert [s.total for s in await import_log(second_broker, archive)] == [3]


@pytest.mark.parametrize("digest", ["abc", 7, "G" * 64])
def test_a_manifest_with_a_digest_that_is_none_is_damaged(tmp_path: Path, digest: Any) -> None:
    (tmp_path / "manifest.json").write_text(
        json.dumps(
            {
                "format": 1,
                "topics": [
                    {"name": "t", "partitions": 1, "records": [1], "bytes": [9], "sha256": [digest]}
                ],
            }
        )
    )
    with pytest.raises(ArchiveError, match="is no SHA-256"):
        read_manifest(tmp_path)


def test_a_manifest_naming_a_path_for_a_topic_is_damaged(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(
        '{"format": 1, "topics": [{"name": "../../etc", "partitions": 1, "records": [1]}]}'
    )
    with pytest.raises(ArchiveError, match=re.escape("'../../etc' is no topic")):
        read_manifest(tmp_path)


async def test_a_refused_resume_creates_no_topic(
    kafka_bootstrap: str, second_broker: str, tmp_path: Path
) -> None:
    """The import created the archive's missing topics before it checked the target's records,
    so a refused resume had written to the target after all."""
    import gzip
    import json

    from aiokafka.admin import AIOKafkaAdminClient

    topics = await three_observations(kafka_bootstrap, "archref", item=True)
    archive = tmp_path / "archive"
    await export_log(kafka_bootstrap, [topics.observations, topics.items], archive)
    # An import that stopped after the first topic: only it exists on the target.
    first = tmp_path / "first"
    cut_short(archive, first, {topics.observations: 3})
    manifest = json.loads((first / "manifest.json").read_text())
    manifest["topics"] = [t for t in manifest["topics"] if t["name"] == topics.observations]
    (first / "manifest.json").write_text(json.dumps(manifest))
    await import_log(second_broker, first)
    # Another log under the same names: its last observation differs.
    part = archive / topics.observations / "0.jsonl.gz"
    with gzip.open(part, "rb") as lines:
        *head, last = lines.read().splitlines(keepends=True)
    with gzip.open(part, "wb") as out:
        out.write(b"".join(head) + last.replace(b'"value":"', b'"value":"AAAA'))
    resized(archive)

    with pytest.raises(ArchiveError, match="holds records this archive does not"):
        await import_log(second_broker, archive, resume=True)
    admin = AIOKafkaAdminClient(bootstrap_servers=second_broker)
    await admin.start()
    try:
        assert topics.items not in await admin.list_topics()
    finally:
        await admin.close()


def test_an_archive_whose_keys_the_keyring_lacks_is_refused(
    kafka_bootstrap: str, second_broker: str, tmp_path: Path
) -> None:
    """Imported where the keyring lacks its keys, a log reads as nothing: every memory was
    skipped as unreadable, with only a log line per record to say so."""
    import asyncio

    from typer.testing import CliRunner

    from streams.cli.main import app as cli

    prefix = f"archkeys{uuid.uuid4().hex[:8]}."
    asyncio.run(ensure_topics(kafka_bootstrap, Topics(prefix), 2))
    source = {
        "ENGRAM_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ENGRAM_TOPIC_PREFIX": prefix,
        "ENGRAM_KEYRING": f"file:{tmp_path / 'source-keys'}",
    }
    runner = CliRunner()
    published = runner.invoke(cli, ["publish", "H001", "Year 1: a flood"], env=source)
    assert published.exit_code == 0, published.output
    assert runner.invoke(cli, ["export", str(tmp_path / "a")], env=source).exit_code == 0
    target = {
        **source,
        "ENGRAM_KAFKA_BOOTSTRAP": second_broker,
        "ENGRAM_KEYRING": f"file:{tmp_path / 'other-keys'}",
    }
    refused = runner.invoke(cli, ["import", str(tmp_path / "a")], env=target)
    assert refused.exit_code == 2, refused.output
    said = " ".join(refused.output.split())
    assert "1 of the 1 keys that sealed the archive's records" in said
    assert "of H001) are not in this deployment's keyring" in said
    with_keys = {**target, "ENGRAM_KEYRING": source["ENGRAM_KEYRING"]}
    imported = runner.invoke(cli, ["import", str(tmp_path / "a")], env=with_keys)
    assert imported.exit_code == 0, imported.output
