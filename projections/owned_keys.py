"""Redis keys a process sets for itself with a lifetime (a version switch's fence, the Qdrant
Edge holder's lease): extended or deleted only while they still hold what it set, in one step,
so that a process whose key ran out and was taken by another never touches the other's."""

from __future__ import annotations

__all__ = ["IF_MINE"]

IF_MINE = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '0' then return redis.call('del', KEYS[1]) end
return redis.call('pexpire', KEYS[1], ARGV[2])
"""
"""``EVAL IF_MINE 1 key value ttl_ms``: 1 if the key held ``value`` and now lives ``ttl_ms``
more (0: is deleted), else 0."""
