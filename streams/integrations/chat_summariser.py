"""Summaries written by a language model behind an OpenAI-compatible chat endpoint (seed 001).

Seed 001 has the agent's own LLM summarise its memories, in the light of its role and identity.
Any server that speaks ``POST {base_url}/chat/completions`` will do (vLLM, llama.cpp, Ollama,
OpenAI). A model is slow and may be down, so this lives in streams/ (network) and not in the
deterministic processors: the caller runs it in a thread (``blocking``), and when the model
fails the extractive summary is written instead, with its own id, so a summary is never lost
and never credited to a model that did not write it.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

import httpx

from processors.summarising import (
    MAX_SUMMARY_CHARS,
    ExtractiveSummariser,
    Summariser,
    SummaryRequest,
    period_of,
    shorten,
)
from schemas.errors import EngramError

log = logging.getLogger("engram.chat_summariser")

_THINKING = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)
_LEVELS = {
    1: (
        "a session summary of the agent's recent memories",
        "Memories, oldest first",
    ),
    2: (
        "a chapter summary: a higher-level account of a longer period, consolidated from the "
        "agent's session summaries",
        "Session summaries, oldest first",
    ),
}


class ChatAnswerError(EngramError):
    """The endpoint answered, but not with a usable summary."""


class ChatSummariser:
    """A chat model writes the summary; the extractive summariser stands in when it cannot."""

    MAX_RESPONSE_BYTES = 1 << 20  # a chat completion is a few kB; more is a misbehaving server

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 30.0,
        *,
        max_tokens: int = 400,
        max_words: int = 120,
        fallback: Summariser | None = None,
    ) -> None:
        url = httpx.URL(base_url.rstrip("/") + "/chat/completions")
        if url.scheme not in ("http", "https") or not url.host:
            # A typo should stop the node at start-up, not fall back on every summary.
            raise ValueError(f"summariser URL must be http(s)://host[:port]/path, not {base_url!r}")
        if not model:
            raise ValueError("a chat summariser needs a model name")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self._url = url
        self._model = model
        self._api_key = api_key or None
        self._timeout = timeout
        self._max_tokens = max_tokens
        self._max_words = max_words
        self._fallback: Summariser = fallback or ExtractiveSummariser()

    @property
    def id(self) -> str:
        return f"chat:{self._model}"

    @property
    def blocking(self) -> bool:
        return True

    @property
    def fallback(self) -> Summariser:
        return self._fallback

    def summarise(self, request: SummaryRequest) -> str:
        return self.summarise_with_origin(request)[0]

    def summarise_with_origin(self, request: SummaryRequest) -> tuple[str, str]:
        if not request.items:
            raise ValueError("nothing to summarise: the request has no items")
        try:
            return self._ask(request), self.id
        except Exception as error:  # any failure: the summary must still be written
            text, origin = self._fallback.summarise_with_origin(request)
            log.warning(
                "chat summariser failed; the summary is extractive",
                extra={
                    "summariser": self.id,
                    "fallback": origin,
                    "agent_id": request.agent_id,
                    "level": request.level,
                    "reason": f"{type(error).__name__}: {error}",
                },
            )
            return text, origin

    def messages(self, request: SummaryRequest) -> list[dict[str, str]]:
        """The prompt: the agent's identity and role first, as seed 001 asks, then the items."""
        task, heading = _LEVELS[request.level]
        system = (
            f"You keep the memory of agent {request.agent_id}, a {request.agent_type} in a "
            f"simulation. Write {task}, from the agent's point of view and in the light of its "
            "role. Keep what matters to such an agent: events, decisions, their outcomes and "
            "when they happened. Use only the facts given; invent nothing. Answer with one plain "
            f"paragraph of at most {self._max_words} words and nothing else."
        )
        lines = []
        period = period_of(request.items)
        if period:
            lines.append(f"Period: {period}.")
        lines.append(f"{heading}:")
        for item in request.items:
            when = ", ".join(
                part
                for part in (
                    f"year {item.year}" if item.year is not None else "",
                    f"step {item.step}" if item.step is not None else "",
                    f"importance {item.importance:.2f}",
                )
                if part
            )
            lines.append(f"- [{when}] {' '.join(item.content.split())}")
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": "\n".join(lines)},
        ]

    def _ask(self, request: SummaryRequest) -> str:
        body = {
            "model": self._model,
            "messages": self.messages(request),
            "temperature": 0,
            "max_tokens": self._max_tokens,
        }
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        # httpx bounds each phase (connect, write, every read); the deadline bounds a server
        # that trickles its answer a byte at a time.
        deadline = time.monotonic() + self._timeout
        with (
            httpx.Client(timeout=self._timeout) as client,
            client.stream("POST", self._url, json=body, headers=headers) as response,
        ):
            response.raise_for_status()
            raw = bytearray()
            for chunk in response.iter_bytes():
                raw += chunk
                if len(raw) > self.MAX_RESPONSE_BYTES:
                    raise ChatAnswerError(f"response over {self.MAX_RESPONSE_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise ChatAnswerError(f"no complete answer within {self._timeout} s")
        return _answer(json.loads(raw))


def _answer(completion: Any) -> str:
    """The text of the first choice, cut to what a summary may hold."""
    try:
        content = completion["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as error:
        raise ChatAnswerError(f"not a chat completion ({error!r})") from None
    if not isinstance(content, str):
        raise ChatAnswerError("the answer is not text")
    text = _THINKING.sub("", content).strip()  # reasoning models think aloud first
    if not text:
        raise ChatAnswerError("the answer is empty")
    return shorten(text, MAX_SUMMARY_CHARS)


def summariser_from_url(
    url: str | None, model: str, api_key: str | None = None, timeout: float = 30.0
) -> Summariser:
    """A chat summariser when a model endpoint is configured, the extractive one otherwise."""
    if not url:
        return ExtractiveSummariser()
    return ChatSummariser(url, model, api_key, timeout)
