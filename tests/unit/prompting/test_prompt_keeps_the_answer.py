"""The memory prompt keeps what answers the question: the turn that holds the answer stays at
every budget that can hold it, in every format, even when it sits in the session's working
memory behind many newer turns; and the new message is never in the prompt twice."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memmachine import open_manager
from memmachine.config import EmbeddingSettings, Settings
from memmachine.manager import MemoryManager
from memmachine.models import FactRecord, NewMessage, Scope
from memmachine.prompting import MemoryPrompt, build_memory_prompt, estimate_tokens
from memmachine.prompting.memory_prompt import EPISODES_HEADER, PREAMBLE

ANSWER = "My locker code at the climbing gym is 4471, please remember it."
QUERY = "What is my locker code at the climbing gym?"
START = datetime(2025, 6, 2, 18, 0, tzinfo=UTC)
FORMATS = ["openai", "anthropic", "gemini"]


@pytest.fixture(scope="module")
async def manager(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MemoryManager]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("answer"), embedding=EmbeddingSettings(provider="none")
    )
    async with open_manager(settings) as manager:
        yield manager


async def seed(manager: MemoryManager, user: str) -> Scope:
    """The answer early in the current session (an episode and a working-memory turn), then
    many longer turns about something else, facts and a summary."""
    scope = Scope(user_id=user, session_id="today")
    filler = [
        f"turn {i}: we compared hiking boots, the rain forecast and the bus timetable " * 3
        for i in range(14)
    ]
    await manager.add_messages(
        scope,
        [
            NewMessage(
                content=text,
                role="user" if i % 2 == 0 else "assistant",
                timestamp=START + timedelta(minutes=i),
            )
            for i, text in enumerate([ANSWER, *filler])
        ],
    )
    await manager.set_facts(
        scope.user_scope(),
        [
            FactRecord(tag="sport", feature=f"note{i}", value=f"likes bouldering {i}")
            for i in range(4)
        ],
    )
    await manager.put_working(scope, summary="They talked about a hiking weekend. " * 4)
    return scope


def text_of(prompt: MemoryPrompt) -> str:
    """Everything the model reads: the system part (a message of its own in OpenAI's shape)
    and the turns."""
    parts = [] if prompt.format == "openai" else [prompt.system]
    for message in prompt.messages:
        if "parts" in message:
            parts += [part["text"] for part in message["parts"]]
        else:
            parts.append(str(message["content"]))
    return "\n".join(parts)


@pytest.mark.parametrize("format", FORMATS)
async def test_the_answering_turn_is_kept_at_every_budget_that_can_hold_it(
    manager: MemoryManager, format: Any
) -> None:
    scope = await seed(manager, f"answer-{format}")
    full = await build_memory_prompt(manager, scope, QUERY, format=format, max_tokens=100_000)
    assert "4471" in text_of(full)
    query_cost = 4 + estimate_tokens(QUERY)
    line = f"- [{START:%Y-%m-%d %H:%M} UTC] user: {ANSWER}\n"
    # the answer alone as a line of the system part: framing, preamble, header, the line
    holds_it = (
        query_cost
        + 4
        + estimate_tokens(PREAMBLE + "\n")
        + estimate_tokens("\n" + EPISODES_HEADER + "\n")
        + estimate_tokens(line)
    )
    kept_at = []
    for budget in range(query_cost, full.token_count + 20, 11):
        prompt = await build_memory_prompt(manager, scope, QUERY, format=format, max_tokens=budget)
        assert prompt.token_count <= budget
        if "4471" in text_of(prompt):
            kept_at.append(budget)
        else:
            assert budget < holds_it, f"the answer was dropped at a budget of {budget}"
        # never twice: as a line and as a turn
        assert text_of(prompt).count("4471") <= 1
    assert kept_at
    assert min(kept_at) < holds_it + 11


@pytest.mark.parametrize("format", FORMATS)
async def test_the_new_message_stored_first_is_not_repeated(
    manager: MemoryManager, format: Any
) -> None:
    scope = await seed(manager, f"twice-{format}")
    # the agent stores the user's message, then asks for the prompt with it
    await manager.add_messages(scope, [NewMessage(content=QUERY, role="user")])
    prompt = await build_memory_prompt(manager, scope, QUERY, format=format)
    assert text_of(prompt).count(QUERY) == 1
    last = prompt.messages[-1]
    assert (last.get("content") or last["parts"][0]["text"]).endswith(QUERY)
    assert "4471" in text_of(prompt)
    # a new message that only resembles an older one keeps the older one as memory
    other = "Which locker did I say I use at the gym?"
    again = await build_memory_prompt(manager, scope, other, format=format)
    assert text_of(again).count(QUERY) == 1
