"""Assemble the context for an agent's next LLM call from its memory, within a token budget.

:func:`build_memory_prompt` reads, for one scope and the user's new message, the profile
facts, the episodes most relevant to the message, and the session's summary and newest
working-memory messages, and lays them out in OpenAI, Anthropic or Gemini request shape:

* a system part: a one-line preamble, then ``## Profile facts`` (``tag / feature: value
  (confidence c)``, highest confidence first, ties broken by relevance to the message),
  ``## Relevant past episodes`` (``[YYYY-MM-DD HH:MM UTC] speaker: content`` in time order),
  ``## Session summary`` and ``## Procedures that worked for similar tasks`` (the
  application's procedures the caller passes, best match first: goal, then steps,
  preconditions and pitfalls on one line each); sections without content are left out,
  and so is the whole system part when nothing fits;
* the recent working-memory messages as conversation turns, oldest first (``system`` and
  ``tool`` messages become user turns prefixed ``[system]`` / ``[tool]``). For Anthropic
  and Gemini, which expect alternating turns that start with the user, leading assistant
  turns are left out and consecutive turns of one role are joined with a blank line;
* the new user message, always last and always kept.

Token budget. Tokens are estimated without a tokenizer: ``ceil(characters / 4)`` per text
(:func:`estimate_tokens`) plus :data:`MESSAGE_OVERHEAD` per message, the system part counting
as one message in every format. ``token_count`` is that estimate of the returned prompt and
never exceeds ``max_tokens``. The new message is reserved first (alone over the budget it
raises :class:`~memmachine.errors.PayloadTooLargeError` naming ``query``); the rest is kept
in priority order and therefore trimmed in the reverse one:

1. recent messages are trimmed first, oldest first: the kept ones are always the newest,
   without gaps;
2. then the session summary;
3. then procedures, worst match first;
4. then episodes, lowest score first;
5. then profile facts, lowest confidence first.

A single fact or episode too long for the room left is skipped and the next one is tried.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

from pydantic import BaseModel, Field

from memmachine.errors import InvalidInputError, PayloadTooLargeError
from memmachine.models import (
    Episode,
    EpisodeHit,
    Fact,
    FactHit,
    MemoryType,
    Scope,
    SearchResult,
    WorkingMemory,
    WorkingMessage,
)
from memmachine.ports.procedures import Procedure

__all__ = [
    "CHARS_PER_TOKEN",
    "MESSAGE_OVERHEAD",
    "MemoryPrompt",
    "MemorySource",
    "PromptFormat",
    "build_memory_prompt",
    "estimate_tokens",
    "prompt_token_count",
]

PromptFormat = Literal["openai", "anthropic", "gemini"]
FORMATS: tuple[str, ...] = get_args(PromptFormat)

#: Characters per token of the estimator: close to BPE tokenizers on English text.
CHARS_PER_TOKEN = 4
#: Tokens charged per message (role and framing) on top of its text.
MESSAGE_OVERHEAD = 4
#: How many of the user's facts are considered at most.
MAX_FACTS = 200

PREAMBLE = (
    "You are talking with a user you have memory of. Use what follows when it is relevant;"
    " it may be incomplete or out of date."
)
FACTS_HEADER = "## Profile facts (confidence from 0 to 1)"
EPISODES_HEADER = "## Relevant past episodes"
SUMMARY_HEADER = "## Session summary"
PROCEDURES_HEADER = "## Procedures that worked for similar tasks"


class MemorySource(Protocol):
    """What a prompt is built from (a :class:`~memmachine.manager.MemoryManager` is one)."""

    async def search(
        self, scope: Scope, query: str, *, top_k: int = 10, types: Sequence[MemoryType] = ...
    ) -> SearchResult: ...

    async def list_facts(self, scope: Scope, *, limit: int = 1000) -> list[Fact]: ...

    async def get_working(self, scope: Scope, *, last_n: int | None = None) -> WorkingMemory: ...


def estimate_tokens(text: str) -> int:
    """Estimated tokens in ``text``: ``ceil(len(text) / CHARS_PER_TOKEN)``."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _message_tokens(text: str) -> int:
    return MESSAGE_OVERHEAD + estimate_tokens(text)


def _line_tokens(line: str) -> int:
    # The line plus its newline: the sum over lines bounds the joined text from above.
    return estimate_tokens(line + "\n")


class MemoryPrompt(BaseModel):
    """The assembled prompt.

    ``messages`` is in the requested format: OpenAI chat messages (the system part first as a
    ``system`` message), Anthropic ``messages`` (``user``/``assistant`` only) or Gemini
    ``contents`` (``user``/``model`` with ``parts``). ``system`` is the system text on its
    own. ``body`` holds the request fields to merge into the provider's call:
    ``{"messages"}`` (OpenAI), ``{"system", "messages"}`` (Anthropic) or
    ``{"system_instruction", "contents"}`` (Gemini); the system field is absent when empty.
    """

    format: PromptFormat
    system: str
    messages: list[dict[str, Any]]
    body: dict[str, Any]
    fact_ids: list[str] = Field(default_factory=list)
    episode_ids: list[str] = Field(default_factory=list)
    procedure_ids: list[str] = Field(default_factory=list)
    #: How many recent working-memory messages were included.
    message_count: int = 0
    summary_included: bool = False
    #: Estimated tokens of the prompt (see the module docstring); never above max_tokens.
    token_count: int
    max_tokens: int
    #: What the budget left out: counts under "facts", "episodes", "summary", "messages".
    dropped: dict[str, int] = Field(default_factory=dict)


@dataclass
class _Turn:
    role: Literal["user", "assistant"]
    text: str


@dataclass
class _Budget:
    limit: int
    used: int = 0
    system_open: bool = False
    sections: set[str] = field(default_factory=set)

    def try_system_line(self, section: str, line: str) -> bool:
        """Charge a system line (plus its section header, the preamble and the system
        message's overhead the first time) when it fits."""
        cost = _line_tokens(line)
        if section not in self.sections:
            cost += _line_tokens("\n" + section)  # a blank line, then the header
        if not self.system_open:
            cost += MESSAGE_OVERHEAD + _line_tokens(PREAMBLE)
        if self.used + cost > self.limit:
            return False
        self.used += cost
        self.sections.add(section)
        self.system_open = True
        return True

    def try_turn(self, text: str) -> bool:
        cost = _message_tokens(text)
        if self.used + cost > self.limit:
            return False
        self.used += cost
        return True


async def build_memory_prompt(
    manager: MemorySource,
    scope: Scope,
    query: str,
    *,
    max_tokens: int = 2000,
    format: PromptFormat = "openai",
    top_k: int = 10,
    recent_messages: int = 20,
    procedures: Sequence[Procedure] = (),
) -> MemoryPrompt:
    """The context for the next LLM call of ``scope`` given the user's new message ``query``.

    Facts and episodes come from all of the user's sessions (episodes narrowed by
    ``agent_id``/``group_id`` when set); the summary and the newest ``recent_messages``
    messages come from ``scope.session_id`` when it is set. Episodes already among those
    messages are not repeated. Layout and budget rules are in the module docstring.
    """
    if format not in FORMATS:
        raise InvalidInputError(f"format must be one of {', '.join(FORMATS)}", field="format")
    if max_tokens < 1:
        raise InvalidInputError("max_tokens must be at least 1", field="max_tokens")
    if recent_messages < 0:
        raise InvalidInputError("recent_messages must be >= 0", field="recent_messages")
    if not query.strip():
        raise InvalidInputError("query must not be empty", field="query")
    budget = _Budget(limit=max_tokens)
    if not budget.try_turn(query):
        raise PayloadTooLargeError(
            f"the query alone is about {_message_tokens(query)} tokens; max_tokens is {max_tokens}",
            field="query",
        )

    memory_scope = scope.model_copy(update={"session_id": None})
    found, facts, working = await asyncio.gather(
        manager.search(
            memory_scope, query, top_k=top_k, types=(MemoryType.EPISODIC, MemoryType.PROFILE)
        ),
        manager.list_facts(memory_scope, limit=MAX_FACTS),
        _working(manager, scope, recent_messages),
    )
    history = working.messages if working is not None else []
    summary = (working.summary or "").strip() if working is not None else ""

    dropped = {"facts": 0, "episodes": 0, "summary": 0, "messages": 0}
    kept_facts: list[Fact] = []
    for fact in _ranked_facts(facts, found.profile):
        if budget.try_system_line(FACTS_HEADER, _fact_line(fact)):
            kept_facts.append(fact)
        else:
            dropped["facts"] += 1

    in_history = {str(m.metadata.get("episode_id")) for m in history if "episode_id" in m.metadata}
    kept_episodes: list[Episode] = []
    for hit in _ranked_episodes(found.episodic, in_history):
        if budget.try_system_line(EPISODES_HEADER, _episode_line(hit.episode)):
            kept_episodes.append(hit.episode)
        else:
            dropped["episodes"] += 1
    kept_episodes.sort(key=lambda episode: (episode.timestamp, episode.sequence))

    kept_procedures = [p for p in procedures if budget.try_system_line(PROCEDURES_HEADER, _how(p))]
    if procedures:
        dropped["procedures"] = len(procedures) - len(kept_procedures)

    summary_kept = bool(summary) and budget.try_system_line(SUMMARY_HEADER, summary)
    dropped["summary"] = int(bool(summary) and not summary_kept)

    turns: list[_Turn] = []
    for message in reversed(history):
        turn = _turn_of(message)
        if not budget.try_turn(turn.text):
            break
        turns.append(turn)
    turns.reverse()
    if format != "openai":
        # Anthropic and Gemini conversations start with a user turn.
        while turns and turns[0].role == "assistant":
            turns.pop(0)
    dropped["messages"] = len(history) - len(turns)
    turns.append(_Turn("user", query))

    system = _system_text(kept_facts, kept_episodes, summary if summary_kept else "")
    if kept_procedures:
        how = "\n".join([PROCEDURES_HEADER, *(_how(p) for p in kept_procedures)])
        system = f"{system or PREAMBLE}\n\n{how}"
    messages, body = _render(format, system, turns)
    prompt = MemoryPrompt(
        format=format,
        system=system,
        messages=messages,
        body=body,
        fact_ids=[fact.id for fact in kept_facts],
        episode_ids=[episode.id for episode in kept_episodes],
        procedure_ids=[p.id for p in kept_procedures],
        message_count=len(turns) - 1,
        summary_included=summary_kept,
        token_count=0,
        max_tokens=max_tokens,
        dropped=dropped,
    )
    prompt.token_count = prompt_token_count(prompt)
    return prompt


def prompt_token_count(prompt: MemoryPrompt) -> int:
    """The estimated tokens of ``prompt`` as returned: every message's text plus
    :data:`MESSAGE_OVERHEAD` each, the system part counted as one message."""
    texts = [prompt.system] if prompt.system else []
    for message in prompt.messages:
        if prompt.format == "openai" and message["role"] == "system":
            continue
        if prompt.format == "gemini":
            texts.append("".join(part["text"] for part in message["parts"]))
        else:
            texts.append(str(message["content"]))
    return sum(_message_tokens(text) for text in texts)


async def _working(manager: MemorySource, scope: Scope, last_n: int) -> WorkingMemory | None:
    if scope.session_id is None:
        return None
    return await manager.get_working(scope, last_n=last_n)


def _ranked_facts(facts: Sequence[Fact], hits: Sequence[FactHit]) -> list[Fact]:
    relevance = {hit.fact.id: hit.score for hit in hits}
    by_id = {fact.id: fact for fact in facts}
    for hit in hits:
        by_id.setdefault(hit.fact.id, hit.fact)
    return sorted(
        by_id.values(),
        key=lambda fact: (-_confidence(fact), -relevance.get(fact.id, 0.0), fact.tag, fact.feature),
    )


def _ranked_episodes(hits: Sequence[EpisodeHit], exclude: set[str]) -> list[EpisodeHit]:
    ranked = [hit for hit in hits if hit.episode.id not in exclude]
    return sorted(ranked, key=lambda hit: -hit.score)


def _fact_line(fact: Fact) -> str:
    return f"- {fact.tag} / {fact.feature}: {fact.value} (confidence {_confidence(fact):.2f})"


def _how(procedure: Procedure) -> str:
    """One procedure as one system line (it is charged and kept whole)."""
    parts = [f"- {procedure.goal}: " + "; ".join(procedure.steps)]
    if procedure.preconditions:
        parts.append("needs: " + "; ".join(procedure.preconditions))
    if procedure.pitfalls:
        parts.append("avoid: " + "; ".join(procedure.pitfalls))
    return " | ".join(parts)


def _confidence(fact: Fact) -> float:
    """What the fact is worth now (aged) when the manager says, else its stored value."""
    return fact.confidence if fact.effective_confidence is None else fact.effective_confidence


def _episode_line(episode: Episode) -> str:
    when = episode.timestamp.strftime("%Y-%m-%d %H:%M UTC")
    speaker = episode.producer or episode.role
    return f"- [{when}] {speaker}: {episode.content}"


def _turn_of(message: WorkingMessage) -> _Turn:
    if message.role == "assistant":
        return _Turn("assistant", message.content)
    if message.role == "user":
        return _Turn("user", message.content)
    return _Turn("user", f"[{message.role}] {message.content}")


def _system_text(facts: Sequence[Fact], episodes: Sequence[Episode], summary: str) -> str:
    sections: list[list[str]] = []
    if facts:
        sections.append([FACTS_HEADER, *(_fact_line(fact) for fact in facts)])
    if episodes:
        sections.append([EPISODES_HEADER, *(_episode_line(episode) for episode in episodes)])
    if summary:
        sections.append([SUMMARY_HEADER, summary])
    if not sections:
        return ""
    return "\n\n".join([PREAMBLE, *("\n".join(lines) for lines in sections)])


def _alternating(turns: Sequence[_Turn]) -> list[_Turn]:
    """Turns for providers that want user/assistant alternation: consecutive same-role
    turns are joined with a blank line."""
    out: list[_Turn] = []
    for turn in turns:
        if out and out[-1].role == turn.role:
            out[-1] = _Turn(turn.role, f"{out[-1].text}\n\n{turn.text}")
        else:
            out.append(_Turn(turn.role, turn.text))
    return out


def _render(
    format: PromptFormat, system: str, turns: Sequence[_Turn]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    if format == "openai":
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        messages += [{"role": turn.role, "content": turn.text} for turn in turns]
        return messages, {"messages": messages}
    merged = _alternating(turns)
    if format == "anthropic":
        messages = [{"role": turn.role, "content": turn.text} for turn in merged]
        return messages, ({"system": system} if system else {}) | {"messages": messages}
    contents: list[dict[str, Any]] = [
        {"role": "model" if turn.role == "assistant" else "user", "parts": [{"text": turn.text}]}
        for turn in merged
    ]
    instruction = {"system_instruction": {"parts": [{"text": system}]}} if system else {}
    return contents, instruction | {"contents": contents}
