"""A log exported from one broker and imported into another is the same log, offsets and all."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from schemas.topics import Topics
from streams.eventlog.archive import (
    ArchiveError,
    archive_notes,
    export_log,
    import_log,
    read_manifest,
)
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
    exported = await export_log(kafka_bootstrap, names, tmp_path / "archive", progress=seen.append)
    assert sum(seen) == 303
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
    imported = runner.invoke(cli, ["import", str(tmp_path / "a")], env=target)
    assert imported.exit_code == 0, imported.output
    assert "imported 1 records" in imported.stdout
    again = runner.invoke(cli, ["import", str(tmp_path / "a")], env=target)
    assert again.exit_code == 2
    assert "already holds records" in again.output
    assert "Traceback" not in again.output


async def test_a_damaged_line_is_named_by_file_and_line(
    kafka_bootstrap: str, second_broker: str, tmp_path: Path
) -> None:
    import gzip

    topics = Topics(f"archbad{uuid.uuid4().hex[:8]}.")
    await ensure_topics(kafka_bootstrap, topics, 1)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(3):
            await producer.send(topics.observations, f'{{"n": {i}}}'.encode(), key=b"A1")
        await producer.flush()
    finally:
        await producer.stop()
    archive = tmp_path / "archive"
    await export_log(kafka_bootstrap, [topics.observations], archive)
    part = archive / topics.observations / "0.jsonl.gz"
    with gzip.open(part, "rb") as lines:
        first, second, third = lines.read().splitlines(keepends=True)
    with gzip.open(part, "wb") as out:
        out.write(first + second[: len(second) // 2] + b"\n" + third)

    with pytest.raises(ArchiveError, match=r"0\.jsonl\.gz, line 2: "):
        await import_log(second_broker, archive)
