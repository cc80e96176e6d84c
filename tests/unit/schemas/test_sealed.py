"""Sealed records open with their agent's key only, and give away nothing but the agent id."""

from __future__ import annotations

import base64
import os
from dataclasses import replace

import orjson
import pytest

from schemas.agent_events import Observation
from schemas.codec import encode_event
from schemas.sealed import (
    NONCE_BYTES,
    RandomNonces,
    SealError,
    is_sealed,
    new_agent_key,
    seal,
    sealed_header,
    unseal,
)


def event_bytes() -> bytes:
    return encode_event(Observation(agent_id="H001", content="the basement flooded again"))


def test_a_sealed_record_opens_with_its_key_and_hides_the_content() -> None:
    key = new_agent_key("H001")
    plain = event_bytes()
    sealed = seal(key, plain)
    assert is_sealed(sealed)
    assert not is_sealed(plain)
    assert b"basement" not in sealed
    assert sealed_header(sealed).agent_id == "H001"
    assert sealed_header(sealed).key_id == key.key_id
    assert unseal(sealed, key) == plain
    # A fresh nonce per record: two seals of the same bytes differ.
    assert seal(key, plain) != sealed


def test_another_key_of_the_same_agent_does_not_open_it() -> None:
    sealed = seal(new_agent_key("H001"), event_bytes())
    other = new_agent_key("H001")
    with pytest.raises(SealError):
        unseal(sealed, other)
    # Even with the key id forged to match, the secret is wrong.
    with pytest.raises(SealError, match="does not open"):
        unseal(sealed, replace(other, key_id=sealed_header(sealed).key_id))


def test_a_record_moved_to_another_agent_or_tampered_with_does_not_open() -> None:
    key = new_agent_key("H001")
    fields = orjson.loads(seal(key, event_bytes()))
    moved = orjson.dumps({**fields, "agent_id": "H002"})
    with pytest.raises(SealError):
        unseal(moved, replace(key, agent_id="H002"))
    data = bytearray(base64.b64decode(fields["data"]))
    data[0] ^= 1
    tampered = orjson.dumps({**fields, "data": base64.b64encode(bytes(data)).decode()})
    with pytest.raises(SealError, match="does not open"):
        unseal(tampered, key)


@pytest.mark.parametrize(
    "raw",
    [b'{"sealed":1,', b'{"sealed":1,"agent_id":"H001"}', b'{"sealed":2,"agent_id":"a"}'],
)
def test_a_broken_sealed_record_is_a_seal_error(raw: bytes) -> None:
    with pytest.raises(SealError):
        sealed_header(raw)


def test_nonces_drawn_ahead_are_never_handed_out_twice() -> None:
    nonces = RandomNonces(block=3)
    drawn = [nonces() for _ in range(10)]  # four blocks from the OS
    assert all(len(n) == NONCE_BYTES for n in drawn)
    assert len(set(drawn)) == len(drawn)


def test_a_forked_child_does_not_seal_with_the_nonces_its_parent_drew_ahead() -> None:
    key, plain = new_agent_key("H001"), event_bytes()
    seal(key, plain)  # the process now holds nonces drawn ahead
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next nonce and leave without pytest's teardown
        os.write(write, sealed_header(seal(key, plain)).nonce.encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child
    assert child != sealed_header(seal(key, plain)).nonce
