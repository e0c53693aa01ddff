"""Session compaction: keep the newest messages of a session's working memory, fold the
older ones into its summary.

:func:`compact_session` reads the session and, when it holds more than
``compaction.trigger_messages`` messages or more than ``compaction.max_tokens`` tokens
(counted by the manager's OpenAI token counter), or always with ``force``, keeps the newest
``keep_last_n`` messages — fewer when they alone do not fit the token budget next to the
summary, never fewer than one — and replaces the older ones by a summary written by the
language model from those messages and the previous summary (recursive summarisation).
Without a language model the older messages are simply dropped (keep-last-N truncation) and
the summary is left as it was.
Raw episodes in episodic memory are never touched: only working memory is rewritten.

What a summary covers is recorded in the session's state under the reserved key
``state["_memmachine"]["summary_covers"]``: the ids of every message folded into the
summary so far (a message's ``metadata["episode_id"]`` when it has one, as every message
added through ``add_messages`` does; else ``"working:"`` and a digest of its time, role
and content), oldest first, bounded to
the newest :data:`MAX_COVERED_IDS`. A message whose id is listed there is never sent to
the model again. ``state["_memmachine"]["compactions"]`` counts the compactions.

The write is conditional on the version read; when the session moved on in between
(``ConflictError``) it is read again and compacted once more; a second conflict is raised
so that a queued job is retried later by the queue.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel, Field

from memmachine.config import CompactionSettings
from memmachine.errors import ConflictError
from memmachine.models import Scope, WorkingMemory, WorkingMessage, utc_now
from memmachine.ports import Job, LanguageModel, TokenCounter, WorkingMemoryStore
from memmachine.prompting.llm import PromptMessage, summarise_messages
from memmachine.prompting.tokens import MESSAGE_OVERHEAD, TokenCounters

__all__ = [
    "MAX_COVERED_IDS",
    "RESERVED_STATE_KEY",
    "CompactionResult",
    "CompactionTarget",
    "compact_if_idle",
    "compact_session",
    "covered_ids",
    "working_tokens",
]

log = logging.getLogger(__name__)

#: The key of the session state that memmachine keeps its own bookkeeping under.
RESERVED_STATE_KEY = "_memmachine"
#: At most this many covered ids are remembered (the newest); older ones left working
#: memory long ago and cannot come back.
MAX_COVERED_IDS = 2_000
#: Estimated tokens per word of summary, to reserve room for the summary in the budget.
_TOKENS_PER_WORD = 1.4


class CompactionTarget(Protocol):
    """What compaction reads and writes (a :class:`~memmachine.manager.MemoryManager` is
    one): the session through the write path, the store to look at it without changing it,
    the settings, the model and the queue for a later check."""

    @property
    def compaction(self) -> CompactionSettings: ...
    @property
    def language_model(self) -> LanguageModel | None: ...
    @property
    def working(self) -> WorkingMemoryStore: ...
    @property
    def token_counters(self) -> TokenCounters: ...

    async def get_working(self, scope: Scope) -> WorkingMemory: ...

    async def put_working(
        self,
        scope: Scope,
        *,
        messages: list[WorkingMessage],
        state: dict[str, Any],
        summary: str | None,
        expected_version: int,
    ) -> WorkingMemory: ...

    async def enqueue_compaction(
        self, scope: Scope, *, idempotency_key: str, idle: bool, delay_seconds: float
    ) -> Job: ...


class CompactionResult(BaseModel):
    """What one compaction did."""

    session_id: str
    #: False when the session was under its thresholds (or too short) and nothing changed.
    compacted: bool
    #: True when the removed messages were folded into the summary by the language model.
    summarised: bool = False
    kept: int = 0
    removed: int = 0
    #: Ids of the messages the summary covers (all compactions so far).
    covered_ids: list[str] = Field(default_factory=list)
    summary: str | None = None
    version: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    reason: str


def working_tokens(
    messages: Sequence[WorkingMessage], summary: str | None, counter: TokenCounter
) -> int:
    """Tokens of a working memory by ``counter``: each message (plus
    :data:`~memmachine.prompting.tokens.MESSAGE_OVERHEAD`) and the summary."""
    total = sum(MESSAGE_OVERHEAD + counter.count(message.content) for message in messages)
    return total + (counter.count(summary) if summary else 0)


def covered_ids(state: dict[str, Any]) -> list[str]:
    """The ids recorded as covered by the summary in a session ``state``."""
    own = state.get(RESERVED_STATE_KEY)
    if not isinstance(own, dict):
        return []
    ids = own.get("summary_covers")
    return [str(item) for item in ids] if isinstance(ids, list) else []


async def compact_session(
    manager: CompactionTarget, scope: Scope, *, force: bool = False
) -> CompactionResult:
    """Compact the working memory of ``scope``'s session; see the module docstring.

    Raises what the model raises (``ModelOutputError`` for an unusable reply,
    ``StoreError`` when it is unreachable) with the session unchanged, and
    ``ConflictError`` when the session changed twice while being compacted."""
    try:
        return await _compact_once(manager, scope, force=force)
    except ConflictError:
        log.info("session %s moved on while being compacted; trying again", scope.session_id)
        return await _compact_once(manager, scope, force=force)


async def _compact_once(
    manager: CompactionTarget, scope: Scope, *, force: bool
) -> CompactionResult:
    settings = manager.compaction
    memory = await manager.get_working(scope)
    session_id = memory.scope.session_id or ""
    messages = memory.messages
    counter = manager.token_counters.compaction
    before = working_tokens(messages, memory.summary, counter)
    covered = covered_ids(memory.state)
    over_count = settings.trigger_messages > 0 and memory.message_count > settings.trigger_messages
    over_budget = before > settings.max_tokens
    if not (force or over_count or over_budget):
        return _unchanged(memory, before, covered, "under the thresholds")
    kept = _kept(messages, settings, counter)
    older = messages[: len(messages) - len(kept)]
    if not older:
        return _unchanged(memory, before, covered, f"{len(messages)} messages: nothing older")
    ids = [_message_id(message) for message in older]
    seen = set(covered)
    fresh = [
        PromptMessage(
            id=message_id,
            role=message.role,
            content=message.content,
            producer=message.producer,
        )
        for message_id, message in zip(ids, older, strict=True)
        if message_id not in seen
    ]
    model = manager.language_model
    summary = memory.summary
    summarised = False
    if model is not None and fresh:
        result = await summarise_messages(
            model,
            fresh,
            settings.summary_max_words,
            previous_summary=memory.summary,
        )
        summary = result.text.strip() or memory.summary
        covered = [*covered, *(message.id for message in fresh)][-MAX_COVERED_IDS:]
        summarised = True
        reason = f"{len(older)} older messages summarised, newest {len(kept)} kept"
    elif model is None:
        reason = (
            f"no language model configured: truncated to the newest {len(kept)} messages "
            "without a summary"
        )
    else:
        reason = f"{len(older)} older messages were already summarised; removed"
    state = dict(memory.state)
    own = dict(state.get(RESERVED_STATE_KEY) or {})
    own["summary_covers"] = covered
    own["compactions"] = int(own.get("compactions", 0)) + 1
    state[RESERVED_STATE_KEY] = own
    written = await manager.put_working(
        scope,
        messages=kept,
        state=state,
        summary=summary if summary != memory.summary else None,
        expected_version=memory.version,
    )
    return CompactionResult(
        session_id=session_id,
        compacted=True,
        summarised=summarised,
        kept=len(kept),
        removed=len(older),
        covered_ids=covered,
        summary=summary,
        version=written.version,
        tokens_before=before,
        tokens_after=working_tokens(kept, summary, counter),
        reason=reason,
    )


async def compact_if_idle(manager: CompactionTarget, scope: Scope) -> CompactionResult:
    """The inactivity trigger: compact ``scope``'s session (as with ``force``) when nothing
    was written to it for ``compaction.idle_seconds``.

    A session holding no more than ``keep_last_n`` messages has nothing to compact and is
    left alone (no further check is queued). A session written to since the check was
    queued gets a new check queued for when that quiet period would end, so the latest
    activity always has one pending. A session that no longer exists is left alone."""
    idle = manager.compaction.idle_seconds
    session_id = scope.session_id or ""
    memory = await manager.working.get(scope, last_n=1)
    if memory is None or memory.updated_at is None:
        return CompactionResult(session_id=session_id, compacted=False, reason="no session")
    if memory.message_count <= manager.compaction.keep_last_n:
        return CompactionResult(
            session_id=session_id,
            compacted=False,
            version=memory.version,
            reason=f"{memory.message_count} messages: nothing to fold into the summary",
        )
    quiet = (utc_now() - memory.updated_at).total_seconds()
    if quiet < idle:
        wait = idle - quiet
        stamp = int(memory.updated_at.timestamp() * 1000)
        await manager.enqueue_compaction(
            scope, idempotency_key=f"idle:{session_id}:at:{stamp}", idle=True, delay_seconds=wait
        )
        return CompactionResult(
            session_id=session_id,
            compacted=False,
            version=memory.version,
            reason=f"written {quiet:.0f}s ago; checking again in {wait:.0f}s",
        )
    return await compact_session(manager, scope, force=True)


def _kept(
    messages: list[WorkingMessage], settings: CompactionSettings, counter: TokenCounter
) -> list[WorkingMessage]:
    """The newest ``keep_last_n`` messages, fewer when they exceed the budget left next to
    the summary; at least one (when there is one)."""
    budget = settings.max_tokens - int(settings.summary_max_words * _TOKENS_PER_WORD)
    kept: list[WorkingMessage] = []
    used = 0
    for message in reversed(messages[-settings.keep_last_n :]):
        cost = MESSAGE_OVERHEAD + counter.count(message.content)
        if kept and used + cost > budget:
            break
        kept.append(message)
        used += cost
    kept.reverse()
    return kept


def _message_id(message: WorkingMessage) -> str:
    episode_id = message.metadata.get("episode_id")
    if episode_id:
        return str(episode_id)
    digest = hashlib.sha256(
        f"{message.timestamp.isoformat()}\n{message.role}\n{message.content}".encode()
    ).hexdigest()
    return f"working:{digest[:20]}"


def _unchanged(
    memory: WorkingMemory, tokens: int, covered: list[str], reason: str
) -> CompactionResult:
    return CompactionResult(
        session_id=memory.scope.session_id or "",
        compacted=False,
        kept=len(memory.messages),
        covered_ids=covered,
        summary=memory.summary,
        version=memory.version,
        tokens_before=tokens,
        tokens_after=tokens,
        reason=reason,
    )
