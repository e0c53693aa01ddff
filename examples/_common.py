"""What the runnable examples share: arguments, the data directory, opening memory (and
reopening it after the restart), the agent loop over a scripted conversation, and the
printed report of what memory recalls.

Every example is one command run from the repository root, ``uv run python -m
examples.<name>``, and takes:

``--data-dir DIR``
    keep the memory in ``DIR`` (created when missing, never removed). Without it the example
    works in a fresh temporary directory that is removed at the end, unless ``--keep``.
``--keep``
    leave the temporary directory in place and print where it is.

The embedding model comes from ``MEMMACHINE_EMBEDDING_MODEL`` like everywhere else in
memmachine (a local ONNX model directory, or a hub name downloaded once); with none
available search runs lexical-only, and the examples still pass.

With a language model configured (``MEMMACHINE_LLM_BASE_URL`` and ``MEMMACHINE_LLM_MODEL``,
or ``OPENAI_API_KEY``, see :func:`example_settings`) every assistant reply comes from the
model, given the memory prompt memmachine assembled for that turn, and each write queues
memmachine's profile extraction, which the example runs in-process at the end of each
session (as ``memmachine serve``'s in-process worker would): the facts the model finds are
added to the profile. Without one, replies come
from the script: each scripted reply is a template whose ``{tag/feature}`` fields are filled
from the profile facts recalled at that moment, so even the scripted run shows recall at
work. Either way the scripted facts are written, so what the example checks after the
restart is the same.

Each example ends with ``RESULT <name>: <n>/<n> recall checks passed`` and exit status 0,
or names the checks that failed and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, cast

from memmachine import MemoryManager, MemoryPrompt, Settings, build_memory_prompt, open_manager
from memmachine.errors import MemMachineError
from memmachine.jobs import Worker
from memmachine.jobs.handlers import handlers_for
from memmachine.models import Episode, EpisodeHit, Fact, FactRecord, FactVersion, NewMessage, Scope

__all__ = [
    "DEFAULT_OPENAI_MODEL",
    "Assistant",
    "Checks",
    "Reply",
    "Say",
    "Session",
    "Story",
    "example_settings",
    "fill_template",
    "heading",
    "open_memory",
    "preview_prompt",
    "recall_facts",
    "recall_history",
    "recall_search",
    "reopen_memory",
    "run_example",
    "shared_block",
    "show_facts",
    "show_history",
    "show_hits",
    "show_prompt",
    "table",
]

#: The model asked when only ``OPENAI_API_KEY`` (or only a base URL) is configured.
DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
#: Longest reply asked of the model.
REPLY_MAX_TOKENS = 300
#: Token budget of the memory prompt built for each turn.
PROMPT_MAX_TOKENS = 1500
#: Width at which printed values are cut.
CELL_WIDTH = 60

_FIELD = re.compile(r"\{([\w.-]+)/([\w.-]+)\}")


# ---------------------------------------------------------------------- the script


@dataclass(frozen=True)
class Say:
    """One turn of a scripted conversation.

    ``user`` is what the person says. ``reply`` is the scripted assistant reply, a template
    whose ``{tag/feature}`` fields are filled from the profile facts recalled for the turn
    (see :func:`fill_template`); it is used only when no language model is configured.
    ``facts`` are the profile facts the turn establishes, ``(tag, feature, value)``.
    """

    user: str
    reply: str
    facts: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class Session:
    """A conversation in one session: who speaks, with which agent, when it began.

    ``scope`` names the user, agent, session and group every message is stored under.
    ``memory_scope`` is what the assistant reads for its memory prompt (default ``scope``);
    a wider one (no ``agent_id``) lets an agent see what other agents recorded. Facts go to
    the user of ``scope`` (a profile is per user, whichever agent writes it). ``began``
    timestamps the first message (default: now); later ones follow a minute apart.
    """

    scope: Scope
    speaker: str
    turns: tuple[Say, ...]
    began: datetime | None = None
    memory_scope: Scope | None = None


# ---------------------------------------------------------------------- settings, memory


def example_settings(data_dir: Path) -> Settings:
    """Settings from the environment, with the data directory set to ``data_dir``.

    The language model is on when ``MEMMACHINE_LLM_MODEL`` and ``MEMMACHINE_LLM_BASE_URL`` (or
    an API key) are set; with an endpoint or key but no model name, the examples ask
    :data:`DEFAULT_OPENAI_MODEL`.
    """
    settings = Settings(data_dir=data_dir)
    llm = settings.llm
    has_key = llm.api_key is not None and bool(llm.api_key.get_secret_value())
    if not llm.model and (llm.base_url or has_key):
        llm = llm.model_copy(update={"model": DEFAULT_OPENAI_MODEL})
    return settings.model_copy(update={"llm": llm})


@asynccontextmanager
async def open_memory(settings: Settings) -> AsyncIterator[MemoryManager]:
    """Open memory on ``settings``, say how search runs, and close it (stopping the embedded
    FalkorDB child) on the way out."""
    async with open_manager(settings) as manager:
        status = manager.embedder_status
        mode = f"hybrid ({status.model})" if status.enabled else f"lexical-only ({status.reason})"
        llm = manager.llm_status
        model = f"replies from {llm.model}" if llm.enabled else "scripted replies (no LLM)"
        print(f"memory opened on {settings.data_dir}: search {mode}; {model}")
        yield manager
    print(f"memory closed: {settings.data_dir} holds everything written so far")


@asynccontextmanager
async def reopen_memory(settings: Settings) -> AsyncIterator[MemoryManager]:
    """Announce the restart, then :func:`open_memory` again on the same data directory: what
    the block reads was written by the memory closed before it."""
    heading("restart: memory was closed above and is reopened on the same data directory")
    async with open_memory(settings) as manager:
        yield manager


# ---------------------------------------------------------------------- the agent loop


@dataclass(frozen=True)
class Reply:
    """An assistant reply, where it came from, the memory prompt it was given and the
    facts the assistant's ``extra_context`` added."""

    text: str
    source: Literal["model", "script"]
    prompt: MemoryPrompt
    extra: tuple[Fact, ...] = ()


@dataclass
class Assistant:
    """A small agent over memmachine: for each user turn it builds the memory prompt, answers
    (with the model when one is configured, else from the script), and stores the exchange
    and the turn's facts.

    ``persona`` opens every model request. ``extra_context`` returns more facts for a turn
    (for instance memory kept under another scope): the model gets them as a system message
    titled ``extra_title``, and they fill the scripted reply's ``{tag/feature}`` fields.
    """

    manager: MemoryManager
    name: str
    persona: str
    extra_context: Callable[[], Awaitable[list[Fact]]] | None = None
    extra_title: str = "Shared memory"
    replies: list[Reply] = field(default_factory=list)

    async def reply(self, session: Session, turn: Say) -> Reply:
        """The assistant's answer to ``turn`` in ``session``, from memory as it is now."""
        memory_scope = _memory_scope(session)
        prompt = await build_memory_prompt(
            self.manager, memory_scope, turn.user, max_tokens=PROMPT_MAX_TOKENS
        )
        extra = await self.extra_context() if self.extra_context is not None else []
        model = self.manager.language_model
        if model is not None:
            messages: list[dict[str, str]] = [{"role": "system", "content": self.persona}]
            if extra:
                messages.append(
                    {"role": "system", "content": shared_block(self.extra_title, extra)}
                )
            messages.extend(cast("list[dict[str, str]]", prompt.messages))
            try:
                text = await model.complete(messages, max_tokens=REPLY_MAX_TOKENS)
            except MemMachineError as exc:
                print(f"  (the model could not answer: {exc.message}; using the scripted reply)")
            else:
                reply = Reply(text.strip(), "model", prompt, tuple(extra))
                self.replies.append(reply)
                return reply
        facts = await self.manager.list_facts(memory_scope)
        reply = Reply(fill_template(turn.reply, [*extra, *facts]), "script", prompt, tuple(extra))
        self.replies.append(reply)
        return reply

    async def converse(self, session: Session) -> list[Episode]:
        """Run ``session``'s turns: record the turn's facts, answer, store both messages;
        then run the background jobs the writes queued (profile extraction, with a language
        model). Returns the stored episodes."""
        title = _session_id(session.scope)
        who = f"agent {session.scope.agent_id}" if session.scope.agent_id else "no agent"
        heading(f"session {title} ({who}, user {session.scope.user_id})")
        began = session.began
        stored: list[Episode] = []
        for index, turn in enumerate(session.turns):
            # The turn's facts are what the agent takes from the user's message; it records
            # them first, so its reply can confirm them.
            if turn.facts:
                records = [FactRecord(tag=t, feature=f, value=v) for t, f, v in turn.facts]
                await self.manager.set_facts(session.scope, records)
            reply = await self.reply(session, turn)
            when = began + timedelta(minutes=2 * index) if began is not None else None
            messages = [
                NewMessage(
                    role="user", producer=session.speaker, content=turn.user, timestamp=when
                ),
                NewMessage(
                    role="assistant",
                    producer=self.name,
                    content=reply.text,
                    timestamp=when + timedelta(minutes=1) if when is not None else None,
                ),
            ]
            stored.extend(await self.manager.add_messages(session.scope, messages))
            print(f"  {session.speaker}: {turn.user}")
            for tag, feature, value in turn.facts:
                print(f"    + fact {tag}/{feature} = {value}")
            print(f"  {self.name} [{reply.source}]: {reply.text}")
        await self.run_jobs(session.scope)
        return stored

    async def run_jobs(self, scope: Scope) -> None:
        """Run the queued background jobs in this process until none is ready, and print the
        profile facts they added or changed for ``scope``'s user. Nothing is queued without
        a language model (compaction triggers only on long sessions)."""
        jobs = self.manager.jobs
        if jobs is None or self.manager.language_model is None:
            return
        before = {(f.tag, f.feature): f.value for f in await self.manager.list_facts(scope)}
        worker = Worker(jobs, handlers_for(self.manager))
        ran = 0
        while await worker.run_once():
            ran += 1
        after = await self.manager.list_facts(scope)
        changed = [f for f in after if before.get((f.tag, f.feature)) != f.value]
        print(f"  background jobs run: {ran}; facts extracted by the model: {len(changed)}")
        for fact in changed:
            print(f"    + fact {fact.tag}/{fact.feature} = {fact.value} ({fact.source})")


def fill_template(template: str, facts: Sequence[Fact]) -> str:
    """``template`` with each ``{tag/feature}`` replaced by that fact's value (the first one
    given wins), or ``(not on record)`` when no such fact is known."""
    values: dict[tuple[str, str], str] = {}
    for fact in facts:
        values.setdefault((fact.tag, fact.feature), fact.value)
    return _FIELD.sub(lambda m: values.get((m[1], m[2]), "(not on record)"), template)


def _session_id(scope: Scope) -> str:
    if scope.session_id is None:
        raise ValueError("a session's scope needs a session_id")
    return scope.session_id


def _memory_scope(session: Session) -> Scope:
    """What the assistant reads for a turn of ``session``: its memory scope, in its session."""
    return (session.memory_scope or session.scope).for_session(_session_id(session.scope))


# ---------------------------------------------------------------------- the report


def heading(title: str) -> None:
    """Print a section title."""
    print(f"\n== {title} ==")


def _cut(text: str, width: int = CELL_WIDTH) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print ``rows`` as aligned, indented columns under ``headers``."""
    cells = [[_cut(str(cell)) for cell in row] for row in rows]
    widths = [len(header) for header in headers]
    for row in cells:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]
    for row in [list(headers), ["-" * width for width in widths], *cells]:
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print(f"  {line}".rstrip())
    if not rows:
        print("  (nothing)")


def shared_block(title: str, facts: Sequence[Fact]) -> str:
    """System text listing ``facts`` under a ``## title`` header (empty without facts)."""
    if not facts:
        return ""
    lines = "\n".join(f"- {fact.tag} / {fact.feature}: {fact.value}" for fact in facts)
    return f"## {title}\n{lines}"


def show_facts(facts: Sequence[Fact]) -> None:
    """Print profile facts by tag and feature, with where each came from."""
    table(
        ["tag", "feature", "value", "source", "from session"],
        [
            [f.tag, f.feature, f.value, f.source, f.source_session_id or "-"]
            for f in sorted(facts, key=lambda f: (f.tag, f.feature))
        ],
    )


def show_hits(hits: Sequence[EpisodeHit]) -> None:
    """Print search hits, best first, with the session and agent that recorded each."""
    table(
        ["score", "session", "agent", "speaker", "content"],
        [
            [
                f"{hit.score:.2f}",
                hit.episode.scope.session_id or "-",
                hit.episode.scope.agent_id or "-",
                hit.episode.producer or hit.episode.role,
                hit.episode.content,
            ]
            for hit in hits
        ],
    )


def show_history(current: Fact | None, versions: Sequence[FactVersion]) -> None:
    """Print a fact's closed versions, oldest first, then its current value."""
    rows = [[v.value, v.reason, v.source_session_id or "-"] for v in versions]
    if current is not None:
        rows.append([current.value, "current", current.source_session_id or "-"])
    table(["value", "status", "recorded in session"], rows)


def show_prompt(prompt: MemoryPrompt) -> None:
    """Print the memory prompt: its system text (``|``), then the conversation turns it
    carries (``>``), the new message last, and what it holds."""
    for line in prompt.system.splitlines():
        print(f"  | {line}".rstrip())
    for message in prompt.messages:
        if message.get("role") != "system":
            print(f"  > {message.get('role')}: {_cut(str(message.get('content', '')), 90)}")
    print(
        f"  ({len(prompt.fact_ids)} facts, {len(prompt.episode_ids)} episodes, "
        f"{prompt.message_count} recent messages; about {prompt.token_count} of "
        f"{prompt.max_tokens} tokens)"
    )


# ---------------------------------------------------------------------- recall, printed


async def recall_facts(
    manager: MemoryManager, title: str, scope: Scope, *, tag: str | None = None
) -> list[Fact]:
    """Print ``title`` and the profile facts of ``scope``'s user (only ``tag`` when given);
    return them."""
    heading(title)
    facts = await manager.list_facts(scope, tag=tag)
    show_facts(facts)
    return facts


async def recall_history(
    manager: MemoryManager, scope: Scope, tag: str, feature: str
) -> tuple[Fact | None, list[FactVersion]]:
    """Print the history of ``tag`` / ``feature`` for ``scope``'s user; return the current
    fact (``None`` when there is none) and its closed versions, oldest first."""
    heading(f"history of {tag} / {feature}")
    current, versions = await manager.fact_history(scope, tag, feature)
    show_history(current, versions)
    return current, versions


async def recall_search(
    manager: MemoryManager, title: str, scope: Scope, query: str, *, top_k: int
) -> list[EpisodeHit]:
    """Print ``title: "query"`` and the ``top_k`` episodes of ``scope`` that search finds for
    ``query``; return them."""
    heading(f'{title}: "{query}"')
    hits = await manager.search_episodes(scope, query, top_k=top_k)
    show_hits(hits)
    return hits


async def preview_prompt(
    manager: MemoryManager, title: str, session: Session, *, preface: str | None = None
) -> MemoryPrompt:
    """Print ``title`` and the memory prompt built for ``session``'s first turn from what the
    session's assistant reads (its ``memory_scope``), at :func:`build_memory_prompt`'s
    default budget; return it. ``preface`` (what the assistant adds of its own, such as
    :func:`shared_block`) is printed first, as system lines followed by an empty one."""
    heading(title)
    if preface is not None:
        for line in [*preface.splitlines(), ""]:
            print(f"  | {line}".rstrip())
    prompt = await build_memory_prompt(manager, _memory_scope(session), session.turns[0].user)
    show_prompt(prompt)
    return prompt


@dataclass
class Checks:
    """What an example verifies after the restart; each result is printed as it is made."""

    name: str
    results: list[tuple[str, bool]] = field(default_factory=list)

    def check(self, label: str, ok: bool) -> bool:
        self.results.append((label, ok))
        print(f"  [{'ok' if ok else 'FAILED'}] {label}")
        return ok

    def finish(self) -> int:
        """Print the closing line; 0 when every check passed, else 1."""
        passed = sum(ok for _, ok in self.results)
        total = len(self.results)
        if passed == total:
            print(f"\nRESULT {self.name}: {passed}/{total} recall checks passed")
            return 0
        failed = "; ".join(label for label, ok in self.results if not ok)
        print(f"\nRESULT {self.name}: {passed}/{total} recall checks passed; failed: {failed}")
        return 1


# ---------------------------------------------------------------------- running


#: An example's body: given settings on its data directory, it writes, restarts, recalls,
#: and returns its checks.
Story = Callable[[Settings], Coroutine[Any, Any, Checks]]


@contextmanager
def _data_directory(name: str, given: str | None, keep: bool) -> Iterator[Path]:
    if given is not None:
        path = Path(given).expanduser().resolve()
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    path = Path(tempfile.mkdtemp(prefix=f"mm-{name}-"))
    try:
        yield path
    finally:
        if keep:
            print(f"data kept in {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)
            print(f"temporary data directory {path} removed")


def run_example(
    name: str, description: str, story: Story, argv: Sequence[str] | None = None
) -> int:
    """Parse the command line, run ``story`` on its data directory, return the exit status
    (1 with a one-line message on stderr when memmachine reports an error)."""
    parser = argparse.ArgumentParser(prog=f"python -m examples.{name}", description=description)
    parser.add_argument(
        "--data-dir",
        help="keep memory in this directory (created if missing, never removed); "
        "default: a fresh temporary directory removed at the end",
    )
    parser.add_argument(
        "--keep", action="store_true", help="do not remove the temporary data directory"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with _data_directory(name, args.data_dir, args.keep) as data_dir:
        print(f"{name}: data directory {data_dir}")
        try:
            checks = asyncio.run(story(example_settings(data_dir)))
        except MemMachineError as exc:
            print(f"{name}: {exc.message}", file=sys.stderr)
            return 1
    return checks.finish()
