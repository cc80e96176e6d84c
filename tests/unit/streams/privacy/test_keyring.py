"""The directory keyring (the dev stack's): one key per agent whoever asks first, tombstones
that tell a forgotten record from an unknown one, and a generation that moves."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.privacy.keyring import FileKeyring, KeyringError, keyring_from_setting


async def test_an_agent_gets_one_key_shared_by_every_process(tmp_path: Path) -> None:
    first, second = FileKeyring(tmp_path), FileKeyring(tmp_path)
    made = (await first.current(["H001", "H002"]))["H001"]
    assert (await second.current(["H001"]))["H001"] == made
    assert await second.key_ids("H001") == [made.key_id]
    assert (await first.lookup([("H001", made.key_id)]))[("H001", made.key_id)] == made
    assert (tmp_path / "keys" / "a-H001").stat().st_mode & 0o077 == 0


async def test_forgetting_deletes_the_key_leaves_a_tombstone_and_moves_the_generation(
    tmp_path: Path,
) -> None:
    keyring = FileKeyring(tmp_path)
    key = (await keyring.current(["H001"]))["H001"]
    other = (await keyring.current(["H002"]))["H002"]
    before = await keyring.generation()

    assert await keyring.forget("H001", [key.key_id]) == [key.key_id]
    assert await keyring.generation() == before + 1
    assert await keyring.key_ids("H001") == []
    found = await keyring.lookup([("H001", key.key_id), ("H001", "never"), ("H002", other.key_id)])
    assert found == {
        ("H001", key.key_id): "forgotten",
        ("H001", "never"): None,
        ("H002", other.key_id): other,
    }
    # Idempotent: a redelivered request deletes nothing more.
    assert await keyring.forget("H001", [key.key_id]) == []

    # The agent publishing again starts a new life, with a new key.
    reborn = (await keyring.current(["H001"]))["H001"]
    assert reborn.key_id != key.key_id
    assert (await keyring.lookup([("H001", key.key_id)]))[("H001", key.key_id)] == "forgotten"


def test_the_setting_names_a_keyring_or_fails_clearly(tmp_path: Path) -> None:
    assert keyring_from_setting("off", redis_url=None, namespace="n") is None
    assert isinstance(
        keyring_from_setting(f"file:{tmp_path}", redis_url=None, namespace="n"), FileKeyring
    )
    with pytest.raises(KeyringError, match="needs ENGRAM_REDIS_URL"):
        keyring_from_setting("redis", redis_url=None, namespace="n")
    with pytest.raises(KeyringError, match="expected 'redis'"):
        keyring_from_setting("vault://x", redis_url=None, namespace="n")
