"""A search whose query embedding fails while its full-text search is in flight, on the real
embedded store with the OpenAI-compatible embedder (the endpoint is the scripted loopback
server, the network edge).

The contract (memmachine/ports/inference.py, memmachine/errors.py): an embedder that fails
raises ``StoreError`` naming the embedder (HTTP 503), never a half answer. The full-text search
the candidates stage (and the focus stage's deep lists) started beside the embedding is
cancelled and awaited (pipeline.embed_beside), so the failed request leaves nothing running
and no exception nobody retrieves; once the endpoint answers again, so does the search.

The endpoint's error comes back in about a millisecond, while the store's BM25 over the
hundreds of episodes every query matches (or the index's first load) takes longer, so the
full-text search is in flight when the embedding fails (checked by hand on every search of
the store legs; a hot index may also have answered first, which must work as well)."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memmachine import Scope, open_manager
from memmachine.config import EmbeddingSettings, RetrievalSettings, SearchIndexSettings, Settings
from memmachine.errors import StoreError
from memmachine.manager import MemoryManager
from memmachine.models import NewMessage
from tests.fakes.embedding_server import FakeOpenAI

API_KEY = "sk-test-embedder-fails-secret"
T0 = datetime(2024, 3, 10, 18, 0, tzinfo=UTC)
DOG = "Melanie adopted a beagle called Toast last spring."
LATE = "Toast chewed a shoe, day"
#: enough episodes that every full-text search below ranks hundreds of them in the store
FILLER = [f"Caroline walked her pets to the market and bought bread, day {n}." for n in range(600)]


@pytest.fixture
def endpoint() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()


def _settings(tmp_path: Path, endpoint: FakeOpenAI, *, index: bool) -> Settings:
    return Settings(
        data_dir=tmp_path,
        embedding=EmbeddingSettings(
            provider="openai",
            base_url=endpoint.base_url,
            model="text-embedding-test",
            api_key=API_KEY,  # type: ignore[arg-type]
        ),
        search_index=SearchIndexSettings(enabled=index),
    )


async def _ingest(memory: MemoryManager, scope: Scope) -> None:
    texts = [*FILLER, DOG]
    messages = [
        NewMessage(
            content=text,
            producer="Melanie" if text == DOG else "Caroline",
            timestamp=T0 + timedelta(seconds=n),
        )
        for n, text in enumerate(texts)
    ]
    for start in range(0, len(messages), 200):
        await memory.add_messages(scope, messages[start : start + 200], working=False)


def _others() -> set[asyncio.Task[object]]:
    return {task for task in asyncio.all_tasks() if task is not asyncio.current_task()}


async def _refused(memory: MemoryManager, scope: Scope, query: str) -> None:
    with pytest.raises(StoreError) as info:
        await memory.search_episodes(scope, query, top_k=5)
    error = info.value
    assert error.store == "embedder"
    assert "401" in error.message
    assert API_KEY not in str(error)


def _left_running(before: set[asyncio.Task[object]]) -> list[str]:
    """The store searches a failed search started and left running when its error came
    back (an index file's save it started in the background is not one)."""
    started = [getattr(task.get_coro(), "__qualname__", "") for task in _others() - before]
    return [name for name in started if name.endswith("_search")]


def _never_retrieved(caplog: pytest.LogCaptureFixture) -> list[str]:
    gc.collect()
    return [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]


@pytest.mark.parametrize("index", [True, False], ids=["index", "store"])
async def test_the_query_embedding_fails_while_full_text_runs(
    tmp_path: Path,
    endpoint: FakeOpenAI,
    index: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="asyncio")
    scope = Scope(user_id="u", session_id="s1")
    async with open_manager(_settings(tmp_path, endpoint, index=index)) as memory:
        await _ingest(memory, scope)
        # On the index leg the first search loads the user's index and the others catch it
        # up with a message added just before; on the store leg each is a BM25 query.
        for n, query in enumerate(
            ("Which dog did Melanie adopt for her pets?", "pets market", "bread")
        ):
            if n:
                endpoint.always = None
                await memory.add_messages(scope, [NewMessage(content=f"{LATE} {n}")], working=False)
            endpoint.always = 401  # not retried: the error comes back at once
            before = _others()
            await _refused(memory, scope, query)
            assert _left_running(before) == []
        assert _never_retrieved(caplog) == []

        endpoint.always = None
        hits = await memory.search_episodes(scope, "Which dog did Melanie adopt?", top_k=5)
        chewed = await memory.search_episodes(scope, "shoe chewed", top_k=5)
    assert endpoint.inputs[-1] == ["shoe chewed"]
    assert hits[0].episode.content == DOG
    # the messages added between the failures are found, each once
    assert sorted(hit.episode.content for hit in chewed[:2]) == [f"{LATE} 1", f"{LATE} 2"]
    assert len({hit.episode.id for hit in chewed}) == len(chewed)


async def test_the_focus_lists_embedding_fails_while_full_text_runs(
    tmp_path: Path, endpoint: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """The speaker focus stage embeds the query without the speaker's name (opt-in) while
    its deeper full-text search runs: the query's own embedding answers, that one fails."""
    caplog.set_level(logging.ERROR, logger="asyncio")
    scope = Scope(user_id="u", session_id="s1")
    focus = RetrievalSettings(speaker_focus_unnamed=True)
    async with open_manager(_settings(tmp_path, endpoint, index=False)) as memory:
        await _ingest(memory, scope)
        memory.retrieval = focus
        for query in ("What pets has Melanie adopted?", "Which pets does Melanie walk?"):
            endpoint.failures = [None, 401]  # the query's vector, then the focus list's
            before = _others()
            await _refused(memory, scope, query)
            assert endpoint.failures == []  # both were asked: the focus stage's failed
            assert _left_running(before) == []
        assert _never_retrieved(caplog) == []

        hits = await memory.search_episodes(scope, "What pets has Melanie adopted?", top_k=5)
    assert endpoint.inputs[-1] == ["What pets has adopted?"]  # the focus list's query
    assert hits[0].episode.content == DOG
    assert "speaker_vector" in hits[0].ranks
