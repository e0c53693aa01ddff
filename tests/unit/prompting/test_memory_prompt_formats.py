"""build_memory_prompt on embedded stores: each provider's request shape, the token budget
and the order in which memory is trimmed to fit it."""

from __future__ import annotations

import itertools
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memmachine import PayloadTooLargeError, open_manager
from memmachine.config import EmbeddingSettings, Settings
from memmachine.errors import InvalidInputError
from memmachine.manager import MemoryManager
from memmachine.models import FactRecord, MemoryType, NewMessage, Scope, WorkingMessage
from memmachine.prompting import MemoryPrompt, build_memory_prompt, estimate_tokens

QUERY = "What did we decide about the sailing trip to Lisbon?"
START = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
async def manager(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MemoryManager]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("prompt"), embedding=EmbeddingSettings(provider="none")
    )
    async with open_manager(settings) as manager:
        yield manager


async def seed(manager: MemoryManager, user: str, *, first_role: str = "user") -> Scope:
    """Facts (short), episodes in another session (longer), a summary (longer still) and
    working messages (longest), so a lower-priority item never fits where a higher one did
    not."""
    scope = Scope(user_id=user, session_id="now")
    await manager.set_facts(
        scope.model_copy(update={"session_id": None}),
        [
            FactRecord(tag="travel", feature=f"f{i}", value=f"v{i}", confidence=c)
            for i, c in enumerate([0.5, 0.9, 0.7, 0.6, 0.8])
        ],
    )
    await manager.add_messages(
        scope.for_session("earlier"),
        [
            NewMessage(
                content=f"Note {i}: the sailing trip to Lisbon needs a boat for {i + 2} people",
                producer="ana" if i % 2 else None,
                role="user" if i % 2 else "assistant",
                timestamp=START + timedelta(days=i),
            )
            for i in range(4)
        ],
        working=False,
    )
    roles = [first_role, "user", "assistant", "user", "tool", "assistant"]
    await manager.append_working(
        scope,
        [
            WorkingMessage(
                role=role,  # type: ignore[arg-type]
                content=f"turn {i} " + "about the harbour and the weather " * 8,
                timestamp=START + timedelta(days=10, minutes=i),
            )
            for i, role in enumerate(roles)
        ],
    )
    await manager.put_working(
        scope, summary="They are planning a sailing trip to Lisbon in June. " * 3
    )
    return scope


def estimate(text: str) -> int:
    return estimate_tokens(text)


def recount(prompt: MemoryPrompt) -> int:
    """The default counter (the estimate), applied to what the prompt actually holds."""
    if prompt.format == "openai":
        texts = [message["content"] for message in prompt.body["messages"]]
    elif prompt.format == "anthropic":
        texts = [prompt.body.get("system", "")] + [m["content"] for m in prompt.body["messages"]]
    else:
        system = prompt.body.get("system_instruction", {"parts": [{"text": ""}]})
        texts = [system["parts"][0]["text"]]
        texts += [part["text"] for m in prompt.body["contents"] for part in m["parts"]]
    return sum(4 + estimate(text) for text in texts if text)


async def test_openai_shape(manager: MemoryManager) -> None:
    scope = await seed(manager, "fmt-openai")
    prompt = await build_memory_prompt(manager, scope, QUERY, format="openai")
    assert prompt.body == {"messages": prompt.messages}
    messages = prompt.messages
    assert messages[0] == {"role": "system", "content": prompt.system}
    assert all(set(message) == {"role", "content"} for message in messages)
    assert all(isinstance(message["content"], str) for message in messages)
    assert {message["role"] for message in messages[1:]} <= {"user", "assistant"}
    assert messages[-1] == {"role": "user", "content": QUERY}
    # every recent message is a turn of its own, in order; the tool message as a user turn
    turns = messages[1:-1]
    assert [m["role"] for m in turns] == ["user", "user", "assistant", "user", "user", "assistant"]
    assert turns[4]["content"].startswith("[tool] turn 4")
    assert prompt.message_count == 6


@pytest.mark.parametrize("first_role", ["user", "assistant"])
async def test_anthropic_shape(manager: MemoryManager, first_role: str) -> None:
    scope = await seed(manager, f"fmt-anthropic-{first_role}", first_role=first_role)
    prompt = await build_memory_prompt(manager, scope, QUERY, format="anthropic")
    assert list(prompt.body) == ["system", "messages"]
    assert prompt.body["system"] == prompt.system
    assert isinstance(prompt.system, str)
    assert prompt.system.startswith("You are talking with a user")
    messages = prompt.body["messages"]
    assert messages == prompt.messages
    assert all(set(m) == {"role", "content"} for m in messages)
    roles = [m["role"] for m in messages]
    # user first, strictly alternating, the new message closing the last user turn
    assert roles[0] == "user"
    assert all(a != b for a, b in itertools.pairwise(roles))
    assert set(roles) <= {"user", "assistant"}
    assert roles[-1] == "user"
    assert messages[-1]["content"].endswith(QUERY)
    if first_role == "assistant":
        assert not any("turn 0" in m["content"] for m in messages)
        assert prompt.message_count == 5
    else:
        assert messages[0]["content"].startswith("turn 0")
        assert "\n\nturn 1" in messages[0]["content"]


async def test_gemini_shape(manager: MemoryManager) -> None:
    scope = await seed(manager, "fmt-gemini", first_role="assistant")
    prompt = await build_memory_prompt(manager, scope, QUERY, format="gemini")
    assert list(prompt.body) == ["system_instruction", "contents"]
    assert prompt.body["system_instruction"] == {"parts": [{"text": prompt.system}]}
    contents = prompt.body["contents"]
    assert contents == prompt.messages
    for content in contents:
        assert set(content) == {"role", "parts"}
        assert content["role"] in ("user", "model")
        assert [set(part) for part in content["parts"]] == [{"text"}]
    roles = [c["role"] for c in contents]
    assert roles[0] == "user"
    assert "model" in roles
    assert all(a != b for a, b in itertools.pairwise(roles))
    assert contents[-1]["role"] == "user"
    assert contents[-1]["parts"][0]["text"].endswith(QUERY)


async def test_system_sections_in_order_with_confidence_dates_and_speakers(
    manager: MemoryManager,
) -> None:
    scope = await seed(manager, "fmt-sections")
    prompt = await build_memory_prompt(manager, scope, QUERY)
    system = prompt.system
    facts_at = system.index("## Profile facts")
    episodes_at = system.index("## Relevant past episodes")
    summary_at = system.index("## Session summary")
    assert facts_at < episodes_at < summary_at
    fact_lines = [line for line in system[facts_at:episodes_at].splitlines() if line[:2] == "- "]
    # highest confidence first, with the confidence shown
    assert [line.split(" (confidence ")[1] for line in fact_lines] == [
        "0.90)",
        "0.80)",
        "0.70)",
        "0.60)",
        "0.50)",
    ]
    assert "- travel / f1: v1 (confidence 0.90)" in fact_lines
    episode_lines = [line for line in system[episodes_at:summary_at].splitlines() if "Note" in line]
    # time order, with date and speaker (producer, else role)
    assert episode_lines == [
        f"- [2024-05-0{i + 1} 09:00 UTC] {'ana' if i % 2 else 'assistant'}: Note {i}: the sailing"
        f" trip to Lisbon needs a boat for {i + 2} people"
        for i in range(4)
    ]
    assert len(prompt.fact_ids) == 5
    assert len(prompt.episode_ids) == 4
    assert prompt.summary_included
    assert "planning a sailing trip" in system[summary_at:]
    assert prompt.dropped == {"facts": 0, "episodes": 0, "summary": 0, "messages": 0}
    assert prompt.token_count == recount(prompt)


@pytest.mark.parametrize("format", ["openai", "anthropic", "gemini"])
async def test_budget_is_never_exceeded(manager: MemoryManager, format: Any) -> None:
    scope = await seed(manager, f"budget-{format}")
    full = await build_memory_prompt(manager, scope, QUERY, format=format, max_tokens=100_000)
    floor = 4 + estimate(QUERY)
    budgets = random.Random(7).sample(range(floor, full.token_count + 40), 60)
    for budget in [floor, full.token_count, full.token_count - 1, *budgets]:
        prompt = await build_memory_prompt(manager, scope, QUERY, format=format, max_tokens=budget)
        assert prompt.token_count <= budget
        assert prompt.token_count == recount(prompt)
        assert prompt.max_tokens == budget
        last = prompt.messages[-1]
        assert (last.get("content") or last["parts"][0]["text"]).endswith(QUERY)


async def test_trimming_keeps_evidence_first_then_turns_summary_and_facts(
    manager: MemoryManager,
) -> None:
    scope = await seed(manager, "trim-order")
    found = await manager.search(
        scope.model_copy(update={"session_id": None}), QUERY, types=(MemoryType.EPISODIC,)
    )
    ranked = sorted(found.episodic, key=lambda hit: -hit.score)
    by_rank = [hit.episode.id for hit in ranked]
    assert len(by_rank) == 4
    line_cost = {
        hit.episode.id: estimate(
            f"- [{hit.episode.timestamp:%Y-%m-%d %H:%M} UTC] "
            f"{hit.episode.producer or hit.episode.role}: {hit.episode.content}\n"
        )
        for hit in ranked
    }
    full = await build_memory_prompt(manager, scope, QUERY, max_tokens=100_000)
    history = [m["content"] for m in full.messages[1:-1]]
    preamble, header = full.system.split("\n")[0], "## Relevant past episodes"
    evidence_cost = (
        4 + estimate(preamble + "\n") + estimate("\n" + header + "\n") + sum(line_cost.values())
    )
    seen: set[tuple[int, int, bool, int]] = set()
    for budget in range(full.token_count, 4 + estimate(QUERY) - 1, -3):
        prompt = await build_memory_prompt(manager, scope, QUERY, max_tokens=budget)
        kept = [m["content"] for m in prompt.messages if m["role"] != "system"][:-1]
        # kept messages are always the newest ones, without gaps
        assert kept == (history[len(history) - len(kept) :] if kept else [])
        # evidence goes last, best-ranked last of all: an episode is left out while a
        # lower-ranked one is kept only when it is the longer of the two
        for high, low in itertools.combinations(by_rank, 2):
            if high not in prompt.episode_ids and low in prompt.episode_ids:
                assert line_cost[high] > line_cost[low]
        # whenever the evidence fits in the budget, no turn, summary or fact displaces it
        if budget - (4 + estimate(QUERY)) >= evidence_cost:
            assert len(prompt.episode_ids) == 4
        # facts (none of them evidence for this query) are dropped lowest confidence first
        confidences = [float(line[-5:-1]) for line in prompt.system.splitlines() if "/ f" in line]
        assert confidences == [0.9, 0.8, 0.7, 0.6, 0.5][: len(confidences)]
        if confidences:
            assert prompt.summary_included or prompt.dropped["summary"] == 1
        seen.add((len(prompt.episode_ids), len(kept), prompt.summary_included, len(confidences)))
    # the sweep went through every stage of trimming
    assert (len(full.episode_ids), full.message_count, full.summary_included) == (4, 6, True)
    assert len(full.fact_ids) == 5
    assert any(episodes == 4 and 0 < turns < 6 for episodes, turns, _, _ in seen)
    assert any(0 < episodes < 4 and turns == 0 for episodes, turns, _, _ in seen)
    assert (0, 0, False, 0) in seen


async def test_query_alone_over_budget_and_bad_arguments(manager: MemoryManager) -> None:
    scope = Scope(user_id="bad-args", session_id="s")
    with pytest.raises(PayloadTooLargeError) as too_big:
        await build_memory_prompt(manager, scope, "x" * 400, max_tokens=50)
    assert too_big.value.field == "query"
    cases: list[tuple[dict[str, Any], str]] = [
        ({"format": "cohere"}, "format"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"recent_messages": -1}, "recent_messages"),
        ({"top_k": 0}, "top_k"),
    ]
    for kwargs, field in cases:
        with pytest.raises(InvalidInputError) as bad:
            await build_memory_prompt(manager, scope, QUERY, **kwargs)
        assert bad.value.field == field
    with pytest.raises(InvalidInputError) as empty:
        await build_memory_prompt(manager, scope, "  ")
    assert empty.value.field == "query"


async def test_empty_memory_gives_just_the_query(manager: MemoryManager) -> None:
    scope = Scope(user_id="nobody-here", session_id="s")
    for format in ("openai", "anthropic", "gemini"):
        prompt = await build_memory_prompt(manager, scope, QUERY, format=format)
        assert prompt.system == ""
        assert len(prompt.messages) == 1
        assert "system" not in prompt.body
        assert "system_instruction" not in prompt.body
        assert prompt.token_count == 4 + estimate(QUERY)
