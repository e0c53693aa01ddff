"""Session compaction on the embedded stores with a scripted model: a long session becomes a
summary plus its newest messages within the token budget, what the summary covers is never
summarised again, and without a model the session is truncated instead."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from memmachine import open_manager
from memmachine.config import (
    CompactionSettings,
    EmbeddingSettings,
    ExtractionSettings,
    LlmSettings,
    Settings,
)
from memmachine.jobs import Worker
from memmachine.jobs.handlers import handlers_for
from memmachine.manager import MemoryManager
from memmachine.models import NewMessage, Scope
from memmachine.pipeline.compaction import compact_session, covered_ids, working_tokens
from tests.fakes.llm_fixtures import llm_server  # noqa: F401  (the fixture)
from tests.fakes.llm_server import ChatRequest, ScriptedChatServer

ALICE = Scope(tenant="acme", user_id="alice", session_id="trip")


def _settings(tmp_path: Path, llm: ScriptedChatServer | None, **compaction: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": tmp_path,
        "embedding": EmbeddingSettings(provider="none"),
        "extraction": ExtractionSettings(enabled=False),
        "compaction": CompactionSettings(
            **{"keep_last_n": 20, "trigger_messages": 40, **compaction}
        ),
    }
    if llm is not None:
        values["llm"] = LlmSettings(base_url=llm.base_url, model="x", max_retries=0)
    return Settings(**values)


@asynccontextmanager
async def _manager(settings: Settings) -> AsyncIterator[MemoryManager]:
    async with open_manager(settings) as manager:
        yield manager


async def _add(manager: MemoryManager, start: int, count: int, size: int = 60) -> None:
    for first in range(start, start + count, 10):
        await manager.add_messages(
            ALICE,
            [
                NewMessage(
                    role="user" if n % 2 == 0 else "assistant",
                    content=f"turn {n:03d} " + "about the trip to Lisbon " * (size // 25),
                )
                for n in range(first, min(first + 10, start + count))
            ],
        )


def _summary_reply(text: str) -> Callable[[ChatRequest], str]:
    def answer(request: ChatRequest) -> str:
        return json.dumps({"text": text, "covered_ids": []})

    return answer


async def test_a_long_session_becomes_a_summary_and_its_newest_messages(
    tmp_path: Path,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    settings = _settings(tmp_path, llm_server, max_tokens=2_000)
    async with _manager(settings) as manager:
        await _add(manager, 0, 60)
        before = await manager.get_working(ALICE)
        episode_ids = [m.metadata["episode_id"] for m in before.messages]
        llm_server.reply(_summary_reply("Alice plans a trip to Lisbon."))

        result = await compact_session(manager, ALICE)

        assert result.compacted
        assert result.summarised
        assert (result.kept, result.removed) == (20, 40)
        after = await manager.get_working(ALICE)
        assert after.summary == "Alice plans a trip to Lisbon."
        assert [m.content for m in after.messages] == [m.content for m in before.messages[40:]]
        assert covered_ids(after.state) == episode_ids[:40]
        assert (
            working_tokens(after.messages, after.summary, manager.token_counters.compaction)
            <= settings.compaction.max_tokens
        )
        # Raw episodes stay in episodic memory.
        _, total = await manager.list_episodes(ALICE)
        assert total == 60
        first_prompt = llm_server.completions[0].last_user_content
        assert "turn 000" in first_prompt
        assert "turn 039" in first_prompt
        assert "turn 040" not in first_prompt

        await _add(manager, 60, 30)
        llm_server.reply(_summary_reply("Alice plans a trip to Lisbon in May."))
        second = await compact_session(manager, ALICE)

        assert second.summarised
        prompt = llm_server.completions[1].last_user_content
        assert "Alice plans a trip to Lisbon." in prompt  # the previous summary is folded in
        for n in range(40):  # nothing already covered is sent again
            assert f"turn {n:03d} " not in prompt
        assert "turn 040" in prompt
        assert "turn 069" in prompt
        again = await manager.get_working(ALICE)
        assert again.summary == "Alice plans a trip to Lisbon in May."
        episodes, _ = await manager.list_episodes(ALICE, limit=1_000)
        assert covered_ids(again.state) == [episode.id for episode in episodes[:70]]
        assert [m.content[:8] for m in again.messages] == [f"turn {n:03d}" for n in range(70, 90)]


async def test_the_token_budget_keeps_fewer_messages_when_they_are_long(
    tmp_path: Path,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    settings = _settings(tmp_path, llm_server, max_tokens=600, summary_max_words=50)
    async with _manager(settings) as manager:
        await _add(manager, 0, 30, size=400)
        llm_server.reply(_summary_reply("A long talk about Lisbon."))
        result = await compact_session(manager, ALICE)
        after = await manager.get_working(ALICE)
        assert 1 <= result.kept < 20
        assert (
            working_tokens(after.messages, after.summary, manager.token_counters.compaction) <= 600
        )
        assert result.tokens_after <= 600 < result.tokens_before


async def test_without_a_model_the_session_is_truncated_to_its_newest_messages(
    tmp_path: Path,
) -> None:
    async with _manager(_settings(tmp_path, None)) as manager:
        await _add(manager, 0, 60)
        result = await compact_session(manager, ALICE)
        assert result.compacted
        assert not result.summarised
        assert "no language model" in result.reason
        after = await manager.get_working(ALICE)
        assert after.summary is None
        assert [m.content[:8] for m in after.messages] == [f"turn {n:03d}" for n in range(40, 60)]
        # Under the thresholds now: a second call changes nothing.
        assert (await compact_session(manager, ALICE)).compacted is False


async def test_passing_the_message_trigger_queues_one_compaction_per_bucket(
    tmp_path: Path,
) -> None:
    async with _manager(_settings(tmp_path, None)) as manager:
        assert manager.jobs is not None
        await _add(manager, 0, 40)
        assert await manager.jobs.list_jobs(ALICE.user_scope()) == []
        await _add(manager, 40, 30)  # 50, 60 and 70 messages: all in the same bucket
        jobs = await manager.jobs.list_jobs(ALICE.user_scope())
        assert [(job.kind, job.status, job.scope.session_id) for job in jobs] == [
            ("compact", "queued", "trip")
        ]
        await _add(manager, 70, 10)  # 80 messages: the next bucket
        assert len(await manager.jobs.list_jobs(ALICE.user_scope())) == 2


async def test_a_queue_that_is_down_never_fails_the_write(tmp_path: Path) -> None:
    async with _manager(_settings(tmp_path, None)) as manager:
        assert manager.jobs is not None
        await manager.jobs.close()  # the queue's server is gone
        await _add(manager, 0, 50)
        assert (await manager.get_working(ALICE)).message_count == 50
        assert (await manager.health()).stores["jobs"].status == "down"


async def _run_due_jobs(manager: MemoryManager) -> int:
    """Run every job that is claimable now; how many ran."""
    assert manager.jobs is not None
    worker = Worker(manager.jobs, handlers_for(manager), worker_id="test")
    ran = 0
    while await worker.run_once():
        ran += 1
    return ran


async def test_passing_the_token_budget_queues_a_compaction_that_meets_it(
    tmp_path: Path,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    settings = _settings(
        tmp_path,
        llm_server,
        trigger_messages=0,
        max_tokens=800,
        summary_max_words=50,
        idle_seconds=0,
    )
    async with _manager(settings) as manager:
        assert manager.jobs is not None
        await _add(manager, 0, 10, size=100)  # under the budget: nothing queued
        assert await manager.jobs.list_jobs(ALICE.user_scope()) == []
        await _add(manager, 10, 30, size=100)  # well over 800 tokens, count trigger off
        jobs = await manager.jobs.list_jobs(ALICE.user_scope())
        assert [(job.kind, job.status) for job in jobs] == [("compact", "queued")]
        llm_server.reply(_summary_reply("Planning a trip to Lisbon."))
        assert await _run_due_jobs(manager) == 1
        after = await manager.get_working(ALICE)
        assert after.summary == "Planning a trip to Lisbon."
        assert (
            working_tokens(after.messages, after.summary, manager.token_counters.compaction) <= 800
        )
        assert after.messages[-1].content.startswith("turn 039")


async def test_an_idle_session_is_compacted_once_it_has_been_quiet(
    tmp_path: Path,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    settings = _settings(tmp_path, llm_server, keep_last_n=4, idle_seconds=0.6)
    async with _manager(settings) as manager:
        assert manager.jobs is not None
        await _add(manager, 0, 10)
        queued = await manager.jobs.list_jobs(ALICE.user_scope())
        assert [(job.kind, job.payload.get("idle")) for job in queued] == [("compact", True)]
        check = queued[0]
        assert check.available_at >= check.created_at + timedelta(seconds=0.59)
        assert await _run_due_jobs(manager) == 0  # not before the quiet period
        await asyncio.sleep(0.3)
        await _add(manager, 10, 2)  # activity: the pending check must not compact
        await asyncio.sleep(0.4)  # the first check is due, but the session was active
        llm_server.reply(_summary_reply("Ten turns about Lisbon."))
        await _run_due_jobs(manager)
        during = await manager.get_working(ALICE)
        assert during.summary is None
        assert during.message_count == 12
        await asyncio.sleep(0.7)  # quiet now for longer than idle_seconds
        await _run_due_jobs(manager)
        after = await manager.get_working(ALICE)
        assert after.summary == "Ten turns about Lisbon."
        assert [m.content[:8] for m in after.messages] == [f"turn {n:03d}" for n in range(8, 12)]
        jobs = await manager.jobs.list_jobs(ALICE.user_scope())
        assert {job.status for job in jobs} == {"done"}  # no check is left pending


async def test_without_a_model_an_idle_session_is_left_as_it_is(tmp_path: Path) -> None:
    settings = _settings(tmp_path, None, keep_last_n=4, idle_seconds=0.2)
    async with _manager(settings) as manager:
        assert manager.jobs is not None
        await _add(manager, 0, 10)
        assert await manager.jobs.list_jobs(ALICE.user_scope()) == []
