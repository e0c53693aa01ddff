"""Assemble the context for an agent's next LLM call from its memory, within a token budget.

:func:`build_memory_prompt` reads, for one scope and the user's new message, the profile
facts, the episodes most relevant to the message, and the session's summary and newest
working-memory messages, and lays them out in OpenAI, Anthropic or Gemini request shape:

* a system part: a one-line preamble, then ``## Profile facts`` (``tag / feature: value
  (confidence c)``, highest confidence first, ties broken by relevance to the message),
  ``## Relevant past episodes`` (``[YYYY-MM-DD HH:MM UTC] speaker: content`` in time order),
  ``## Session summary`` and ``## Procedures that worked for similar tasks`` (the
  application's procedures the caller passes, best match first, one line each: goal, steps,
  preconditions, pitfalls); sections without content are left out, and so is the whole
  system part when nothing fits;
* the recent working-memory messages as conversation turns, oldest first (``system`` and
  ``tool`` messages become user turns prefixed ``[system]`` / ``[tool]``). For Anthropic
  and Gemini, which expect alternating turns that start with the user, leading assistant
  turns are left out and consecutive turns of one role are joined with a blank line;
* the new user message, always last and always kept.

Token budget. Every text is counted by the deployment's token counter for the format
(:class:`~memmachine.prompting.tokens.TokenCounters`: the script-aware estimate unless a real
tokenizer is configured) plus :data:`MESSAGE_OVERHEAD` per message, the system part counting
as one message in every format. ``token_count`` is that count of the returned prompt and
never exceeds ``max_tokens``; ``tokenizer`` names the counter. The new message is reserved
first (alone over the budget it raises :class:`~memmachine.errors.PayloadTooLargeError`
naming ``query``). Then one rule decides what else is kept, in this order, each item kept
when it still fits (a single fact or episode too long for the room left is skipped and the
next one tried):

1. evidence for the query, best first: the episodes and facts the search ranks highest,
   taken by rank (an episode and a fact of equal rank: the episode first). An episode that
   is also one of the session's recent messages is evidence like any other: it is shown as
   its turn when that turn is kept, else among the relevant episodes;
2. the recent messages, newest first and without gaps (once one does not fit, no older one
   is kept);
3. the application's procedures the caller passes, best match first;
4. the session summary;
5. the other profile facts, highest confidence first.

So weaker material never pushes out better-ranked evidence for the query. The new message is
never repeated: when the session's newest message is the same user text (the agent stored it
before asking for the prompt) that message, and the episode stored from it, are left out.
"""

from __future__ import annotations

import asyncio
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
from memmachine.ports import TokenCounter
from memmachine.ports.procedures import Procedure
from memmachine.prompting.tokens import MESSAGE_OVERHEAD, TokenCounters, estimate_tokens

__all__ = [
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

    @property
    def token_counters(self) -> TokenCounters: ...

    async def search(
        self,
        scope: Scope,
        query: str,
        *,
        top_k: int = 10,
        types: Sequence[MemoryType] = ...,
        query_vector: Sequence[float] | None = ...,
    ) -> SearchResult: ...

    async def list_facts(self, scope: Scope, *, limit: int = 1000) -> list[Fact]: ...

    async def get_working(self, scope: Scope, *, last_n: int | None = None) -> WorkingMemory: ...


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
    #: Tokens of the prompt by ``tokenizer`` (see the module docstring); never above
    #: max_tokens.
    token_count: int
    max_tokens: int
    #: The token counter the budget was kept with: ``estimate``, ``tiktoken:<encoding>``
    #: or ``tokenizers:<path>``.
    tokenizer: str = "estimate"
    #: What the budget left out: counts under "facts", "episodes", "summary", "messages".
    dropped: dict[str, int] = Field(default_factory=dict)


@dataclass
class _Turn:
    role: Literal["user", "assistant"]
    text: str
    episode_id: str | None = None


@dataclass
class _Budget:
    """Charges what is kept against ``limit``, counting with ``counter``."""

    limit: int
    counter: TokenCounter
    used: int = 0
    system_open: bool = False
    sections: set[str] = field(default_factory=set)

    def line_cost(self, line: str) -> int:
        # The line plus its newline: the sum over lines bounds the joined text from above.
        return self.counter.count(line + "\n")

    def turn_cost(self, text: str) -> int:
        return MESSAGE_OVERHEAD + self.counter.count(text)

    def try_system_line(self, section: str, line: str) -> bool:
        """Charge a system line (plus its section header, the preamble and the system
        message's overhead the first time) when it fits."""
        cost = self.line_cost(line)
        if section not in self.sections:
            cost += self.line_cost("\n" + section)  # a blank line, then the header
        if not self.system_open:
            cost += MESSAGE_OVERHEAD + self.line_cost(PREAMBLE)
        if not self.fits(cost):
            return False
        self.sections.add(section)
        self.system_open = True
        return True

    def fits(self, cost: int) -> bool:
        """Charge ``cost`` (negative: a refund) when it fits."""
        if self.used + cost > self.limit:
            return False
        self.used += cost
        return True


@dataclass
class _Kept:
    """What the rule kept, in the order it kept it."""

    facts: list[Fact] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list)
    turns: list[_Turn] = field(default_factory=list)  # newest first
    procedures: list[Procedure] = field(default_factory=list)
    summary: str = ""
    order: list[tuple[str, Any]] = field(default_factory=list)

    def drop_last(self) -> None:
        """Give back the item kept last (the least important one)."""
        kind, item = self.order.pop()
        if kind == "fact":
            self.facts.remove(item)
        elif kind == "episode":
            self.episodes.remove(item)
        elif kind == "turn":
            self.turns.remove(item)
        elif kind == "procedure":
            self.procedures.remove(item)
        else:
            self.summary = ""


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
    query_vector: Sequence[float] | None = None,
) -> MemoryPrompt:
    """The context for the next LLM call of ``scope`` given the user's new message ``query``
    (its vector ``query_vector`` when the caller embedded it already, for the procedures).

    Facts and episodes come from all of the user's sessions (episodes narrowed by
    ``agent_id``/``group_id`` when set); the summary and the newest ``recent_messages``
    messages come from ``scope.session_id`` when it is set. Layout and budget rules are in
    the module docstring.
    """
    if format not in FORMATS:
        raise InvalidInputError(f"format must be one of {', '.join(FORMATS)}", field="format")
    if max_tokens < 1:
        raise InvalidInputError("max_tokens must be at least 1", field="max_tokens")
    if recent_messages < 0:
        raise InvalidInputError("recent_messages must be >= 0", field="recent_messages")
    if not query.strip():
        raise InvalidInputError("query must not be empty", field="query")
    counter = manager.token_counters.for_format(format)
    budget = _Budget(limit=max_tokens, counter=counter)
    if not budget.fits(budget.turn_cost(query)):
        raise PayloadTooLargeError(
            f"the query alone is {budget.turn_cost(query)} tokens ({counter.name}); "
            f"max_tokens is {max_tokens}",
            field="query",
        )

    memory_scope = scope.model_copy(update={"session_id": None})
    found, facts, working = await asyncio.gather(
        manager.search(
            memory_scope,
            query,
            top_k=top_k,
            types=(MemoryType.EPISODIC, MemoryType.PROFILE),
            query_vector=query_vector,
        ),
        manager.list_facts(memory_scope, limit=MAX_FACTS),
        _working(manager, scope, recent_messages + 1),
    )
    history = list(working.messages) if working is not None else []
    summary = (working.summary or "").strip() if working is not None else ""
    the_query = _stored_query(history, query)
    if the_query is not None:
        history.pop()
    history = history[-recent_messages:] if recent_messages else []
    turns = [_turn_of(message) for message in history]
    evidence = [
        hit
        for hit in found.episodic
        if not _is_the_query(hit.episode, the_query, query, scope.session_id)
    ]

    kept = _keep(budget, evidence, found.profile, facts, turns, summary, procedures)
    fact_count = len({f.id for f in facts} | {h.fact.id for h in found.profile})
    while True:
        prompt = _assemble(format, query, kept, max_tokens, counter.name)
        prompt.dropped = {
            "facts": fact_count - len(kept.facts),
            "episodes": len(evidence) - len(kept.episodes) - _as_turns(evidence, kept),
            "summary": int(bool(summary) and not kept.summary),
            "messages": len(turns) - len(kept.turns),
        }
        if procedures:
            prompt.dropped["procedures"] = len(procedures) - len(kept.procedures)
        prompt.token_count = prompt_token_count(prompt, counter)
        if prompt.token_count <= max_tokens or not kept.order:
            return prompt
        # The parts were counted one by one; joined they may count a little differently.
        kept.drop_last()


def _keep(
    budget: _Budget,
    evidence: Sequence[EpisodeHit],
    fact_hits: Sequence[FactHit],
    facts: Sequence[Fact],
    turns: Sequence[_Turn],
    summary: str,
    procedures: Sequence[Procedure] = (),
) -> _Kept:
    """Apply the module docstring's rule: evidence, recent turns, procedures, summary,
    other facts."""
    kept = _Kept()
    in_turns = {turn.episode_id for turn in turns if turn.episode_id}
    as_line: dict[str, int] = {}  # evidence in the session's turns, kept as a line: its cost
    ranked_hits = sorted(evidence, key=lambda hit: -hit.score)
    ranked_facts = sorted(fact_hits, key=lambda hit: -hit.score)
    for rank in range(max(len(ranked_hits), len(ranked_facts))):
        if rank < len(ranked_hits):
            episode = ranked_hits[rank].episode
            line = _episode_line(episode)
            if budget.try_system_line(EPISODES_HEADER, line):
                kept.episodes.append(episode)
                kept.order.append(("episode", episode))
                if episode.id in in_turns:
                    as_line[episode.id] = budget.line_cost(line)
        if rank < len(ranked_facts):
            _keep_fact(budget, kept, ranked_facts[rank].fact)

    for turn in reversed(turns):
        refund = as_line.pop(turn.episode_id, 0) if turn.episode_id else 0
        if not budget.fits(budget.turn_cost(turn.text) - refund):
            if refund:
                as_line[turn.episode_id or ""] = refund
            break
        if refund:  # shown as its turn now, not as a line
            kept.episodes = [e for e in kept.episodes if e.id != turn.episode_id]
        kept.turns.append(turn)
        kept.order.append(("turn", turn))

    for procedure in procedures:
        if budget.try_system_line(PROCEDURES_HEADER, _how(procedure)):
            kept.procedures.append(procedure)
            kept.order.append(("procedure", procedure))

    if summary and budget.try_system_line(SUMMARY_HEADER, summary):
        kept.summary = summary
        kept.order.append(("summary", summary))

    relevance = {hit.fact.id: hit.score for hit in fact_hits}
    for fact in sorted(facts, key=lambda f: (-_confidence(f), -relevance.get(f.id, 0.0))):
        _keep_fact(budget, kept, fact)
    return kept


def _keep_fact(budget: _Budget, kept: _Kept, fact: Fact) -> None:
    if any(held.id == fact.id for held in kept.facts):
        return
    if budget.try_system_line(FACTS_HEADER, _fact_line(fact)):
        kept.facts.append(fact)
        kept.order.append(("fact", fact))


def _as_turns(evidence: Sequence[EpisodeHit], kept: _Kept) -> int:
    """Evidence episodes shown as their kept turn rather than as a line."""
    turn_ids = {turn.episode_id for turn in kept.turns}
    return sum(1 for hit in evidence if hit.episode.id in turn_ids)


def _assemble(
    format: PromptFormat, query: str, kept: _Kept, max_tokens: int, tokenizer: str
) -> MemoryPrompt:
    turns = list(reversed(kept.turns))
    if format != "openai":
        # Anthropic and Gemini conversations start with a user turn.
        while turns and turns[0].role == "assistant":
            turns.pop(0)
    facts = sorted(kept.facts, key=lambda fact: (-_confidence(fact), fact.tag, fact.feature))
    episodes = sorted(kept.episodes, key=lambda episode: (episode.timestamp, episode.sequence))
    system = _system_text(facts, episodes, kept.summary)
    if kept.procedures:
        how = "\n".join([PROCEDURES_HEADER, *(_how(p) for p in kept.procedures)])
        system = f"{system or PREAMBLE}\n\n{how}"
    messages, body = _render(format, system, [*turns, _Turn("user", query)])
    return MemoryPrompt(
        format=format,
        system=system,
        messages=messages,
        body=body,
        fact_ids=[fact.id for fact in facts],
        episode_ids=[episode.id for episode in episodes],
        procedure_ids=[procedure.id for procedure in kept.procedures],
        message_count=len(turns),
        summary_included=bool(kept.summary),
        token_count=0,
        max_tokens=max_tokens,
        tokenizer=tokenizer,
    )


def prompt_token_count(prompt: MemoryPrompt, counter: TokenCounter | None = None) -> int:
    """The tokens of ``prompt`` as returned, by ``counter`` (the estimate when not given):
    every message's text plus :data:`MESSAGE_OVERHEAD` each, the system part counted as one
    message."""
    count = counter.count if counter is not None else estimate_tokens
    texts = [prompt.system] if prompt.system else []
    for message in prompt.messages:
        if prompt.format == "openai" and message["role"] == "system":
            continue
        if prompt.format == "gemini":
            texts.append("".join(part["text"] for part in message["parts"]))
        else:
            texts.append(str(message["content"]))
    return sum(MESSAGE_OVERHEAD + count(text) for text in texts)


def _stored_query(history: Sequence[WorkingMessage], query: str) -> WorkingMessage | None:
    """The session's newest message when it is the new message itself, stored already."""
    if history and history[-1].role == "user" and history[-1].content.strip() == query.strip():
        return history[-1]
    return None


def _is_the_query(
    episode: Episode, stored: WorkingMessage | None, query: str, session_id: str | None
) -> bool:
    """Whether ``episode`` is the new message, stored before the prompt was asked for."""
    if stored is not None and str(stored.metadata.get("episode_id", "")) == episode.id:
        return True
    return (
        session_id is not None
        and episode.scope.session_id == session_id
        and episode.content.strip() == query.strip()
    )


async def _working(manager: MemorySource, scope: Scope, last_n: int) -> WorkingMemory | None:
    if scope.session_id is None:
        return None
    return await manager.get_working(scope, last_n=last_n)


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
    episode_id = str(message.metadata["episode_id"]) if "episode_id" in message.metadata else None
    if message.role in ("user", "assistant"):
        return _Turn(message.role, message.content, episode_id)
    return _Turn("user", f"[{message.role}] {message.content}", episode_id)


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
