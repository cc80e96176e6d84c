"""Sealing and opening records with the agents' keys, for every process that writes or reads the
log: publishers, workers, the episodic projector, replay, history.

Keys are fetched in bulk before a batch (``prepare_*``, one keyring round trip for what is not
cached), so the per-record work (:meth:`RecordSealer.seal`, :meth:`RecordSealer.open`) is
synchronous and runs inside the pure batch code. A cache stays valid until the keyring's
generation moves (someone forgot an agent); tombstones are kept for good.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import orjson

from schemas.codec import DecodeError
from schemas.sealed import AgentKey, SealError, is_sealed, seal, sealed_header, unseal
from streams.privacy.keyring import Keyring

_ERASURE = b'"memory.agent_forgotten"'

FORGOTTEN = "forgotten"
"""The :class:`DecodeError` kind of a record sealed with a deleted key: skipped, not a poison."""


class RecordSealer:
    def __init__(self, keyring: Keyring | None) -> None:
        self.keyring = keyring
        self._current: dict[str, AgentKey] = {}
        self._keys: dict[tuple[str, str], AgentKey] = {}
        self._forgotten: set[tuple[str, str]] = set()
        self._generation: int | None = None
        self._refreshed_at = -float("inf")

    @property
    def enabled(self) -> bool:
        return self.keyring is not None

    async def refresh(self) -> None:
        """Drop cached keys if an agent was forgotten since they were read (one small read)."""
        if self.keyring is None:
            return
        generation = await self.keyring.generation()
        if generation != self._generation:
            self._current.clear()
            self._keys.clear()
            self._generation = generation

    async def refresh_every(self, seconds: float) -> None:
        """:meth:`refresh` at most every ``seconds``: for writers outside the batch path
        (publishers, the query service's retrieval records), which trust keys that long."""
        now = time.monotonic()
        if now - self._refreshed_at >= seconds:
            await self.refresh()
            self._refreshed_at = now

    async def prepare_seal(self, agent_ids: Iterable[str]) -> None:
        if self.keyring is None:
            return
        missing = {a for a in agent_ids if a not in self._current}
        if missing:
            for agent, key in (await self.keyring.current(missing)).items():
                self._current[agent] = key
                self._keys[(agent, key.key_id)] = key

    def current_keys(self, agent_ids: Iterable[str]) -> dict[str, AgentKey]:
        """The keys :meth:`prepare_seal` fetched for these agents (none without a keyring): a
        writer that seals later, with the keys of now, keeps them."""
        return {a: self._current[a] for a in agent_ids if a in self._current}

    def seal(self, agent_id: str, plaintext: bytes) -> bytes:
        """The record as it goes on a topic: sealed when a keyring is configured."""
        if self.keyring is None:
            return plaintext
        return seal(self._current[agent_id], plaintext)

    async def prepare_open(self, raws: Iterable[bytes | None]) -> None:
        wanted: set[tuple[str, str]] = set()
        for raw in raws:
            if raw is not None and is_sealed(raw):
                try:
                    header = sealed_header(raw)
                except SealError:
                    continue  # open() reports it
                pair = (header.agent_id, header.key_id)
                if pair not in self._keys and pair not in self._forgotten:
                    wanted.add(pair)
        if wanted and self.keyring is not None:
            for pair, found in (await self.keyring.lookup(wanted)).items():
                if isinstance(found, AgentKey):
                    self._keys[pair] = found
                elif found == FORGOTTEN:
                    self._forgotten.add(pair)

    def open(self, raw: bytes) -> bytes:
        """The event's bytes; :class:`DecodeError` ``forgotten`` for a forgotten agent's record,
        ``key_missing`` if the keyring does not know the key (nothing was prepared, or the
        keyring is not the one the record was sealed against)."""
        if not is_sealed(raw):
            return raw
        try:
            header = sealed_header(raw)
        except SealError as exc:
            raise DecodeError("invalid", str(exc)) from None
        pair = (header.agent_id, header.key_id)
        if pair in self._forgotten:
            raise DecodeError(
                FORGOTTEN, f"sealed with key {header.key_id} of {header.agent_id}, forgotten"
            )
        key = self._keys.get(pair)
        if key is None:
            where = "no keyring is configured (ENGRAM_KEYRING=off)"
            if self.keyring is not None:
                where = "the keyring does not hold it (is ENGRAM_KEYRING the one it used?)"
            raise DecodeError(
                "key_missing",
                f"sealed with key {header.key_id} of {header.agent_id}, and {where}",
            )
        try:
            return unseal(header, key)
        except SealError as exc:
            raise DecodeError("invalid", str(exc)) from None

    def forget(self, agent_id: str, key_ids: Iterable[str]) -> None:
        """What this process learned by forgetting an agent itself, before any refresh."""
        for key_id in key_ids:
            self._forgotten.add((agent_id, key_id))
            self._keys.pop((agent_id, key_id), None)
        current = self._current.get(agent_id)
        if current is not None and (agent_id, current.key_id) in self._forgotten:
            del self._current[agent_id]

    def learn_forgotten(self, raws: Iterable[bytes | None]) -> None:
        """Take note of the erasures (plain records) among records read from the derived log.

        Read back, the derived topics interleave: an agent's sealed records may come after its
        ``AgentForgotten`` although the worker logged them before it. Every record of a key the
        erasure names is then erased anyway, so it is left unopened, whatever the order and
        whether or not the keyring still has the key.
        """
        for raw in raws:
            if raw is None or is_sealed(raw) or _ERASURE not in raw:
                continue
            try:
                fields = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(fields, dict) and fields.get("event_type") == "memory.agent_forgotten":
                key_ids = fields.get("key_ids") or ()
                self.forget(str(fields.get("agent_id")), [str(k) for k in key_ids])

    async def open_all(self, raws: list[bytes | None]) -> list[bytes | DecodeError | None]:
        """Each record opened, or its :class:`DecodeError`, or None for a tombstone."""
        self.learn_forgotten(raws)
        await self.prepare_open(raws)
        out: list[bytes | DecodeError | None] = []
        for raw in raws:
            if raw is None:
                out.append(None)
                continue
            try:
                out.append(self.open(raw))
            except DecodeError as exc:
                out.append(exc)
        return out
