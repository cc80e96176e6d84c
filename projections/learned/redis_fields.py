"""The learned events as writes to the agent's Redis hash, beside its working memory.

They live beside the agent's working memory (:mod:`projections.working.redis_store`): facts in
a hash of their own, ``{ns}:wm:facts:{agent_id}``, everything else in ``{ns}:wm:mem:{agent_id}``
under fields that are never memory ids (reads of memories follow the ZSET of ids). Facts are
apart because superseded ones stay, with their embeddings: in the one hash, every tool
selection and plan lookup read them all, a cost that grew with the agent's fact history.
Forgetting the agent deletes both hashes, and clearing a namespace clears them. Fields
(``#l:`` values, ``#v:`` the revision each value was written at, in the same hash):

* ``#l:p:{skill}`` a procedure's rate, uses and revision; ``#l:p:{skill}:d`` its description
  and embedding; ``#l:p:{skill}:t:{slot}`` a text attached by an upvote (``{skill}``: the
  SHA-1 of its name, :func:`procedure_field`);
* ``#l:c:{plan_id}`` a cached plan (prompt, actions, embedding); ``#l:s:{plan_id}`` its score
  and thresholds; both deleted when it is evicted;
* ``#l:f:{fact_id}`` a fact; ``#l:f:{fact_id}:to`` when and by which fact it was superseded;
  ``#l:f:{fact_id}:n`` how many searches returned it (absent: none), at its revision;
* ``#l:m:{memory_id}`` the feedback counted on a memory.

A write happens only at a revision at least the one stored (:data:`LEARN_SCRIPT`), so
applying an event again, or an older one after a newer one from another source topic, never
takes a value back; an eviction keeps its revision, so a replayed caching cannot resurrect
the plan.
"""

from __future__ import annotations

import hashlib
from typing import Any, assert_never

import orjson

from schemas.learned_events import (
    FactAccessed,
    FactStated,
    LearnedEvent,
    MemoryRated,
    PlanChanged,
    ProcedureChanged,
)

VALUE_PREFIX = b"#l:"
FACT_PREFIX = b"#l:f:"
"""Of the fields that live in the facts hash."""
ACCESS_SUFFIX = b":n"
"""Of a fact's field: the count of the searches that returned it."""

LEARN_SCRIPT = b"""
local position = KEYS[3]
if position then
  local applied = redis.call('GET', position)
  if applied and tonumber(applied) > tonumber(ARGV[1]) then
    return 0
  end
end
for i = 2, #ARGV, 3 do
  local field, rev, value = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local key = KEYS[1]
  if string.sub(field, 1, 5) == '#l:f:' then
    key = KEYS[2]
  end
  local vfield = '#v:' .. string.sub(field, 4)
  local known = redis.call('HGET', key, vfield)
  if not known or tonumber(rev) >= tonumber(known) then
    if value == '' then
      redis.call('HDEL', key, field)
    else
      redis.call('HSET', key, field, value)
    end
    redis.call('HSET', key, vfield, rev)
  end
end
if position then
  redis.call('SET', position, ARGV[1])
end
return 1
"""
"""KEYS: the agent's memories hash, its facts hash, the applied-offset key (absent without a
position). ARGV: the source offset, then (field, revision, value) triples; an empty value
deletes. A fact's fields (:data:`FACT_PREFIX`) go to the facts hash, the rest to the other."""

LEARN_SHA = hashlib.sha1(LEARN_SCRIPT).hexdigest().encode()

Write = tuple[bytes, int, bytes]
"""A field, the revision it is written at, and its value (empty: delete it)."""


def _json(value: dict[str, Any]) -> bytes:
    return orjson.dumps(value)


def learned_writes(event: LearnedEvent) -> list[Write]:
    """The field writes that apply ``event``. Every learned type is named (``assert_never``)."""
    match event:
        case ProcedureChanged():
            return _procedure(event)
        case PlanChanged():
            return _plan(event)
        case FactStated():
            return _fact(event)
        case MemoryRated():
            rating = event.model_dump(
                mode="json", include={"memory_id", "level", "upvotes", "downvotes", "revision"}
            )
            return [(b"#l:m:" + event.memory_id.encode(), event.revision, _json(rating))]
        case FactAccessed():
            count = {"access_count": event.access_count, "revision": event.revision}
            field = b"#l:f:" + event.fact_id.encode() + ACCESS_SUFFIX
            return [(field, event.revision, _json(count))]
        case _:
            assert_never(event)


def procedure_field(name: str) -> bytes:
    """A skill's field: its name hashed, since a name may end like the suffixes below."""
    return b"#l:p:" + hashlib.sha1(name.encode()).hexdigest().encode()


def _procedure(event: ProcedureChanged) -> list[Write]:
    name = procedure_field(event.name)
    summary = {
        "name": event.name,
        "success_rate": event.success_rate,
        "usage_count": event.usage_count,
        "revision": event.revision,
        "attached_count": event.attached_count,
        "updated_at": event.occurred_at.isoformat(),
    }
    writes: list[Write] = [(name, event.revision, _json(summary))]
    if event.change == "created" and event.description_embedding is not None:
        described = {
            "description": event.description or "",
            "embedding": event.description_embedding,
            "created_at": event.occurred_at.isoformat(),
        }
        writes.append((name + b":d", 0, _json(described)))
    attached = event.attached
    if attached is not None:
        text = attached.model_dump(mode="json", include={"text", "embedding", "decision_event_id"})
        writes.append((name + b":t:%d" % attached.slot, event.attached_count, _json(text)))
    return writes


def _plan(event: PlanChanged) -> list[Write]:
    plan, score = b"#l:c:" + event.plan_id.encode(), b"#l:s:" + event.plan_id.encode()
    if event.change == "evicted":
        return [(plan, event.revision, b""), (score, event.revision, b"")]
    scored = {
        "score": event.score,
        "revision": event.revision,
        "similarity_threshold": event.similarity_threshold,
        "score_threshold": event.score_threshold,
    }
    writes: list[Write] = [(score, event.revision, _json(scored))]
    if event.change == "cached":
        cached = event.model_dump(
            mode="json",
            include={"plan_id", "decision_event_id", "skill", "prompt", "prompt_embedding"},
        )
        cached["actions"] = [a.model_dump(mode="json") for a in event.actions]
        cached["cached_at"] = event.occurred_at.isoformat()
        writes.append((plan, 0, _json(cached)))
    return writes


def _fact(event: FactStated) -> list[Write]:
    fact = event.model_dump(
        mode="json",
        include={
            "fact_id",
            "subject",
            "attribute",
            "value",
            "confidence",
            "valid_from",
            "origin",
            "source_event_ids",
            "supersedes",
            "embedding",
        },
    )
    writes: list[Write] = [(b"#l:f:" + event.fact_id.encode(), 0, _json(fact))]
    if event.supersedes is not None:
        ended = {"valid_to": event.valid_from.isoformat(), "superseded_by": event.fact_id}
        writes.append((b"#l:f:" + event.supersedes.encode() + b":to", 0, _json(ended)))
    return writes


def learn_args(offset: bytes, writes: list[Write]) -> list[bytes]:
    """ARGV of :data:`LEARN_SCRIPT`."""
    args = [offset]
    for field, revision, value in writes:
        args.extend((field, b"%d" % revision, value))
    return args
