"""Who may call the query service and the MCP server, and for which agents: API keys from a
JSON file, each a SHA-256 digest with the agents it may act for and what it may do.

The file (``ENGRAM_API_KEYS_FILE``)::

    {"keys": [{"name": "planner", "sha256": "<hex SHA-256 of the key>",
               "agents": ["H*", "team-a.*"], "scopes": ["read", "publish"]}]}

Only digests are stored, so the file is no secret a reader could replay. A request presents
``Authorization: Bearer <key>``; the key is hashed and compared with every digest in constant
time (``hmac.compare_digest``), and the key itself is never kept or logged, only its name.
``agents`` are shell-style patterns (:func:`fnmatch.fnmatchcase`) matched against the agent a
request names; ``scopes`` are independent: ``read`` (retrieval, history, recall), ``publish``
(recording observations), ``admin`` (operations on the deployment itself).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from schemas.errors import EngramError

__all__ = [
    "ApiKey",
    "ApiKeys",
    "ApiKeysFileError",
    "Decision",
    "Scope",
    "digest",
    "load_api_keys",
]

Scope = Literal["read", "publish", "admin"]

Sha256Hex = Annotated[
    str, StringConstraints(pattern=r"^[0-9a-fA-F]{64}$", to_lower=True, strip_whitespace=True)
]


class ApiKeysFileError(EngramError):
    """The keys file cannot be read or is not what it should be; the message says which key
    and field, never a digest."""


class ApiKey(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[str, StringConstraints(min_length=1, max_length=200)] = Field(
        description="Who holds the key: what logs and errors name."
    )
    sha256: Sha256Hex = Field(repr=False, description="Hex SHA-256 of the key's UTF-8 bytes.")
    agents: tuple[Annotated[str, StringConstraints(min_length=1)], ...] = Field(
        min_length=1, description="Patterns of the agents it may act for; '*' is every agent."
    )
    scopes: tuple[Scope, ...] = Field(min_length=1)

    def may_act_for(self, agent_id: str) -> bool:
        return any(fnmatchcase(agent_id, pattern) for pattern in self.agents)


def digest(key: str) -> str:
    """What the keys file stores for ``key``: ``printf %s KEY | sha256sum``."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Decision:
    """The answer to one request: ``status`` 200 to go ahead, else 401 or 403 and why."""

    status: Literal[200, 401, 403]
    reason: str = ""
    key: ApiKey | None = None

    @property
    def allowed(self) -> bool:
        return self.status == 200


class ApiKeys(BaseModel):
    """The keys a deployment accepts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    keys: tuple[ApiKey, ...] = Field(min_length=1)

    def authenticate(self, authorization: str | None) -> ApiKey | None:
        """The key an ``Authorization`` header presents, or None. Every digest is compared,
        whichever matches, so the time taken says nothing about which keys exist."""
        token = bearer_token(authorization)
        if token is None:
            return None
        presented = [d.encode("ascii") for d in _digests(token)]
        found: ApiKey | None = None
        for key in self.keys:
            stored = key.sha256.encode("ascii")
            for candidate in presented:
                if hmac.compare_digest(candidate, stored):
                    found = key
        return found

    def decide(self, authorization: str | None, scope: Scope, agent_id: str | None) -> Decision:
        """Whether a request with this header may do ``scope`` for ``agent_id`` (None: a
        request naming no agent)."""
        key = self.authenticate(authorization)
        if key is None:
            reason = "missing bearer token" if authorization is None else "unknown API key"
            return Decision(401, reason)
        return authorize(key, scope, agent_id)


def _digests(token: str) -> list[str]:
    """The digests a presented key may stand for. The server hands a header over decoded as
    Latin-1 (Starlette does), so a key with characters past ASCII, sent as UTF-8 (``clé``),
    arrives as other characters: its bytes, got back by encoding as Latin-1, are the key the
    keys file holds the digest of. Always two entries, so the time says nothing either."""
    try:
        sent = token.encode("latin-1")
    except UnicodeEncodeError:  # not from a header's bytes: the key as given
        sent = token.encode("utf-8")
    return [digest(token), hashlib.sha256(sent).hexdigest()]


def authorize(key: ApiKey, scope: Scope, agent_id: str | None) -> Decision:
    if scope not in key.scopes:
        return Decision(403, f"API key {key.name!r} lacks the {scope!r} scope", key)
    if agent_id is not None and not key.may_act_for(agent_id):
        return Decision(403, f"API key {key.name!r} may not act for agent {agent_id!r}", key)
    return Decision(200, key=key)


def bearer_token(authorization: str | None) -> str | None:
    """The token of ``Bearer <token>`` (the scheme in any case, RFC 7235), else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def load_api_keys(path: Path) -> ApiKeys:
    """The keys of ``path``; :class:`ApiKeysFileError` says what is wrong with it."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ApiKeysFileError(f"cannot read the API keys file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ApiKeysFileError(f"the API keys file {path} is not UTF-8 text: {exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ApiKeysFileError(f"the API keys file {path} is not JSON: {exc}") from None
    try:
        keys = ApiKeys.model_validate(document)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'file'}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        )
        raise ApiKeysFileError(f"the API keys file {path} is invalid: {problems}") from None
    names = [key.name for key in keys.keys]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ApiKeysFileError(f"the API keys file {path} names keys twice: {', '.join(twice)}")
    digests = [key.sha256 for key in keys.keys]
    if len(set(digests)) != len(digests):
        raise ApiKeysFileError(f"the API keys file {path} holds one key under two names")
    return keys
