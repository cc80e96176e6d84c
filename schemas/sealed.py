"""Sealed records: an event's JSON encrypted with its agent's key, so deleting the key makes every
copy of the event unreadable (on the topics, in exports, in backups of the broker).

The log is immutable; Kafka cannot delete one agent's records from a partition. Crypto-shredding
is how an event-sourced store forgets: each agent's content is encrypted with a key of its own,
and ``engram forget-agent`` deletes the key (deploy/README.md, "Forgetting an agent").

Wire form, a JSON object whose first key tells it apart from an event without parsing it::

    {"sealed": 1, "agent_id": "...", "key_id": "...", "nonce": "<b64>", "data": "<b64>"}

``data`` is AES-256-GCM of the event's JSON bytes, with ``agent_id`` and ``key_id`` as
associated data: a sealed record moved to another agent or key does not open. The agent id
stays readable: it keys the partition and names the key, and it is the one thing a forgotten
agent leaves behind.
"""

from __future__ import annotations

import base64
import os
import re
import threading
from dataclasses import dataclass, field

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from schemas.errors import EngramError

SEALED_PREFIX = b'{"sealed":1,'
"""orjson keeps key order, so every sealed record starts with these bytes; an event never does
(its first key is ``schema_version`` or ``event_type``)."""

KEY_BYTES = 32
NONCE_BYTES = 12


class SealError(EngramError, ValueError):
    """A record claims to be sealed but its header, or its ciphertext under the key, is broken."""


@dataclass(frozen=True)
class AgentKey:
    agent_id: str
    key_id: str
    secret: bytes
    cipher: AESGCM = field(init=False, repr=False, compare=False)
    """Made once per key: a worker seals every derived record with its agent's key."""

    def __post_init__(self) -> None:
        if len(self.secret) != KEY_BYTES:
            raise ValueError(f"an agent key has {KEY_BYTES} bytes, not {len(self.secret)}")
        object.__setattr__(self, "cipher", AESGCM(self.secret))

    def __repr__(self) -> str:
        return f"AgentKey(agent_id={self.agent_id!r}, key_id={self.key_id!r}, secret=<hidden>)"


def new_agent_key(agent_id: str) -> AgentKey:
    return AgentKey(agent_id, os.urandom(8).hex(), AESGCM.generate_key(bit_length=256))


@dataclass(frozen=True)
class SealedHeader:
    """A sealed record parsed once: whose it is, which key opens it, and what to open."""

    agent_id: str
    key_id: str
    nonce: str = ""
    data: str = ""


def _associated(agent_id: str, key_id: str) -> bytes:
    return f"engram/sealed/v1\x00{agent_id}\x00{key_id}".encode()


def is_sealed(raw: bytes) -> bool:
    return raw.startswith(SEALED_PREFIX)


class RandomNonces:
    """Nonces for AES-GCM, each as random as ``os.urandom(NONCE_BYTES)`` and never handed out
    twice, read from the OS a block at a time.

    A read from the OS per record was a system call that releases the interpreter: in a worker
    whose other threads (Faust's consumer, the episodic store's flush) wait for it, getting it
    back made that line ~2% of a drain's samples, ten times the call's own cost. A nonce need
    not be secret, only never repeated under a key, so drawing ahead is safe within one
    process; a forked child drops what its parent drew ahead (``os.register_at_fork``), or
    both would seal with the same nonces."""

    def __init__(self, block: int = 4096) -> None:
        self._block = block * NONCE_BYTES
        self._lock = threading.Lock()
        self._pool = b""
        self._at = 0

    def __call__(self) -> bytes:
        with self._lock:
            if self._at >= len(self._pool):
                self._pool, self._at = os.urandom(self._block), 0
            at = self._at
            self._at = at + NONCE_BYTES
            return self._pool[at : at + NONCE_BYTES]

    def forget_drawn(self) -> None:
        self._lock = threading.Lock()  # a lock held by another thread at the fork stays held
        self._pool, self._at = b"", 0


_nonces = RandomNonces()
os.register_at_fork(after_in_child=_nonces.forget_drawn)


def seal(key: AgentKey, plaintext: bytes) -> bytes:
    nonce = _nonces()
    data = key.cipher.encrypt(nonce, plaintext, _associated(key.agent_id, key.key_id))
    return orjson.dumps(
        {
            "sealed": 1,
            "agent_id": key.agent_id,
            "key_id": key.key_id,
            "nonce": base64.b64encode(nonce).decode("ascii"),
            "data": base64.b64encode(data).decode("ascii"),
        }
    )


def _fields(raw: bytes) -> dict[str, object]:
    try:
        fields = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SealError(f"a sealed record that is not JSON: {exc}") from None
    if not isinstance(fields, dict) or fields.get("sealed") != 1:
        raise SealError("not a sealed record of version 1")
    return fields


_AGENT_ID = re.compile(r"[A-Za-z0-9_.:@\-]{1,200}")
""":data:`schemas.envelope.AgentId`'s rule."""
_KEY_ID = re.compile(r"[0-9a-f]{1,64}")
"""What :func:`new_agent_key` makes (16 hex digits), with room."""


def sealed_header(raw: bytes) -> SealedHeader:
    """Who a sealed record belongs to and which key opens it, read without the key."""
    fields = _fields(raw)
    agent_id, key_id = fields.get("agent_id"), fields.get("key_id")
    if not isinstance(agent_id, str) or not isinstance(key_id, str) or not agent_id or not key_id:
        raise SealError("a sealed record without agent_id and key_id")
    # Checked here, before a keyring is asked: an id no event accepts (300 characters, a NUL)
    # made the file keyring's lookup fail, which the worker took for a keyring outage and
    # retried without end, every partition stalled behind one forged record.
    if not _AGENT_ID.fullmatch(agent_id):
        raise SealError(f"a sealed record whose agent_id is no agent id: {agent_id[:200]!r}")
    if not _KEY_ID.fullmatch(key_id):
        raise SealError(f"a sealed record whose key_id is not a key id: {key_id[:100]!r}")
    nonce, data = fields.get("nonce"), fields.get("data")
    if not isinstance(nonce, str) or not isinstance(data, str):
        raise SealError("a sealed record without nonce and data")
    return SealedHeader(agent_id, key_id, nonce, data)


def unseal(raw: bytes | SealedHeader, key: AgentKey) -> bytes:
    """The event's JSON bytes; :class:`SealError` if the record was not sealed with ``key``.
    Takes the record's bytes, or its :func:`sealed_header` (not parsed twice)."""
    sealed = raw if isinstance(raw, SealedHeader) else sealed_header(raw)
    if sealed.agent_id != key.agent_id or sealed.key_id != key.key_id:
        raise SealError(
            f"sealed for {sealed.agent_id!r}/{sealed.key_id!r}, not {key.agent_id!r}/{key.key_id!r}"
        )
    try:
        return key.cipher.decrypt(
            base64.b64decode(sealed.nonce),
            base64.b64decode(sealed.data),
            _associated(key.agent_id, key.key_id),
        )
    except (InvalidTag, ValueError) as exc:
        raise SealError(f"the sealed data does not open with its key ({exc!r})") from None
