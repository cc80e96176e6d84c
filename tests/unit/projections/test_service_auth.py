"""API keys: the file's rules, and who may do what for which agent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from projections.service.auth import ApiKeys, ApiKeysFileError, bearer_token, digest, load_api_keys

READER = "reader-key-0123456789"
PUBLISHER = "publisher-key-0123456789"


def keys_document(**overrides: object) -> dict[str, object]:
    return {
        "keys": [
            {
                "name": "households",
                "sha256": digest(READER),
                "agents": ["H*", "team-a.*"],
                "scopes": ["read"],
            },
            {
                "name": "planner",
                "sha256": digest(PUBLISHER).upper(),  # hex in either case
                "agents": ["*"],
                "scopes": ["read", "publish"],
            },
        ],
        **overrides,
    }


@pytest.fixture
def keys() -> ApiKeys:
    return ApiKeys.model_validate(keys_document())


def test_digest_is_the_hex_sha256_a_shell_computes() -> None:
    # printf %s abc | sha256sum
    assert digest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("", None),
        ("Bearer", None),
        ("Bearer   ", None),
        ("Basic abc", None),
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("  BEARER  abc  ", "abc"),
    ],
)
def test_the_token_is_read_from_a_bearer_header_only(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_a_known_key_is_found_by_its_digest(keys: ApiKeys) -> None:
    found = keys.authenticate(f"Bearer {PUBLISHER}")
    assert found is not None
    assert found.name == "planner"
    assert keys.authenticate(f"Bearer {READER}x") is None
    assert keys.authenticate(READER) is None  # no scheme


def test_no_key_or_an_unknown_one_is_401(keys: ApiKeys) -> None:
    assert keys.decide(None, "read", "H001").status == 401
    assert keys.decide(None, "read", "H001").reason == "missing bearer token"
    unknown = keys.decide("Bearer nope", "read", "H001")
    assert (unknown.status, unknown.reason) == (401, "unknown API key")


def test_agents_are_glob_patterns(keys: ApiKeys) -> None:
    header = f"Bearer {READER}"
    assert keys.decide(header, "read", "H001").allowed
    assert keys.decide(header, "read", "team-a.bob").allowed
    refused = keys.decide(header, "read", "team-b.bob")
    assert refused.status == 403
    assert refused.reason == "API key 'households' may not act for agent 'team-b.bob'"
    assert keys.decide(header, "read", "h001").status == 403  # case matters
    assert keys.decide(header, "read", None).allowed  # a request naming no agent


def test_a_missing_scope_is_403_whatever_the_agent(keys: ApiKeys) -> None:
    refused = keys.decide(f"Bearer {READER}", "publish", "H001")
    assert (refused.status, refused.reason) == (
        403,
        "API key 'households' lacks the 'publish' scope",
    )
    assert keys.decide(f"Bearer {PUBLISHER}", "publish", "anyone").allowed
    assert keys.decide(f"Bearer {PUBLISHER}", "admin", "anyone").status == 403


def test_the_digest_stays_out_of_the_key_repr(keys: ApiKeys) -> None:
    assert digest(READER) not in repr(keys)


def write(tmp_path: Path, content: object) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_a_valid_file_loads(tmp_path: Path) -> None:
    loaded = load_api_keys(write(tmp_path, keys_document()))
    assert [key.name for key in loaded.keys] == ["households", "planner"]
    assert loaded.keys[1].sha256 == digest(PUBLISHER)  # normalised to lower case


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not JSON"),
        ({"keys": []}, "keys: Tuple should have at least 1 item"),
        ({}, "keys: Field required"),
        (
            {"keys": [{"name": "a", "sha256": "xyz", "agents": ["*"], "scopes": ["read"]}]},
            "keys.0.sha256: String should match pattern",
        ),
        (
            {"keys": [{"name": "a", "sha256": "0" * 64, "agents": ["*"], "scopes": ["write"]}]},
            "keys.0.scopes.0: Input should be 'read', 'publish' or 'admin'",
        ),
        (
            {"keys": [{"name": "a", "sha256": "0" * 64, "agents": [], "scopes": ["read"]}]},
            "keys.0.agents: Tuple should have at least 1 item",
        ),
        (
            {
                "keys": [
                    {"name": "a", "sha256": "0" * 64, "agents": ["*"], "scopes": ["read"], "x": 1}
                ]
            },
            "keys.0.x: Extra inputs are not permitted",
        ),
        (
            {
                "keys": [
                    {"name": "a", "sha256": "0" * 64, "agents": ["*"], "scopes": ["read"]},
                    {"name": "a", "sha256": "1" * 64, "agents": ["*"], "scopes": ["read"]},
                ]
            },
            "names keys twice: a",
        ),
        (
            {
                "keys": [
                    {"name": "a", "sha256": "0" * 64, "agents": ["*"], "scopes": ["read"]},
                    {"name": "b", "sha256": "0" * 64, "agents": ["*"], "scopes": ["admin"]},
                ]
            },
            "holds one key under two names",
        ),
    ],
)
def test_a_bad_file_is_one_sentence_naming_the_problem(
    tmp_path: Path, content: object, message: str
) -> None:
    with pytest.raises(ApiKeysFileError, match="API keys file") as raised:
        load_api_keys(write(tmp_path, content))
    assert message in str(raised.value)
    assert "0" * 64 not in str(raised.value)  # digests are not echoed


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ApiKeysFileError, match=r"cannot read the API keys file .*No such file"):
        load_api_keys(tmp_path / "absent.json")


def test_a_file_that_is_not_utf_8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_bytes(b'{"keys": ["\xff"]}')
    with pytest.raises(ApiKeysFileError, match=rf"API keys file {path} is not UTF-8 text"):
        load_api_keys(path)
