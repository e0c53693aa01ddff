"""A time named in a Chinese or Russian question ranks the episode from then first, through
the manager's search on the embedded stores, as the same question in English does."""

# Chinese and Russian text is this module's subject: its letters are meant, not confusables.
# ruff: noqa: RUF001

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from memmachine import Scope, open_manager
from memmachine.config import EmbeddingSettings, RetrievalSettings, Settings
from memmachine.manager import MemoryManager
from memmachine.models import NewMessage

USER = Scope(user_id="u")
#: The episode from last May, from yesterday and from today (the newest: "now" for search).
LAST_MAY = datetime(2023, 5, 20, 12, 0, tzinfo=UTC)
YESTERDAY = datetime(2024, 6, 4, 12, 0, tzinfo=UTC)
TODAY = datetime(2024, 6, 5, 12, 0, tzinfo=UTC)

# The same words at three times, a colour apart (a message said twice would be one memory).
# A Latin brand name is what the questions share with the episodes word for word, whatever
# the analyser makes of the rest.
EPISODES = {
    "en": (
        "I bought a red kettle at IKEA",
        "I bought a blue kettle at IKEA",
        "I bought a green kettle at IKEA",
    ),
    "zh": ("我在 IKEA 买了一个红水壶", "我在 IKEA 买了一个蓝水壶", "我在 IKEA 买了一个绿水壶"),
    "ru": (
        "Я купил красный чайник в IKEA",
        "Я купил синий чайник в IKEA",
        "Я купил зелёный чайник в IKEA",
    ),
}
#: Per language: a question naming last May, and the same question naming yesterday.
QUESTIONS = {
    "en": ("What did I buy at IKEA in May last year?", "What did I buy at IKEA yesterday?"),
    "zh": ("我去年五月在 IKEA 买了什么？", "我昨天在 IKEA 买了什么？"),
    "ru": ("Что я купил в IKEA в мае прошлого года?", "Что я купил в IKEA вчера?"),
}
#: Only the time ranges stage on, so that nothing else moves the ranking.
ONLY_TIME = {
    "fusion": "rrf",
    "sentence_derivatives": False,
    "context_window": 0,
    "lexical_context": 0,
    "speaker_boost": 0.0,
    "time_boost": 1.0,
    "when_boost": 0.0,
    "neighbour_weight": 0.0,
    "second_neighbour_weight": 0.0,
    "distinct_evidence": False,
    "speaker_focus_weight": 0.0,
}


async def first(memory: MemoryManager, query: str) -> datetime:
    hits = await memory.search_episodes(USER, query, top_k=3)
    assert len(hits) == 3
    return hits[0].episode.timestamp


@pytest.mark.parametrize("language", ["en", "zh", "ru"])
async def test_the_episode_from_the_time_a_question_names_ranks_first(
    tmp_path: Path, language: str
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        embedding=EmbeddingSettings(provider="none"),
        retrieval=RetrievalSettings(**ONLY_TIME),
    )
    in_may, yesterday = QUESTIONS[language]
    async with open_manager(settings) as memory:
        moments = (("may", LAST_MAY), ("yesterday", YESTERDAY), ("today", TODAY))
        for (session, moment), content in zip(moments, EPISODES[language], strict=True):
            message = NewMessage(content=content, producer="ann", timestamp=moment)
            await memory.add_messages(
                Scope(user_id="u", session_id=session), [message], working=False
            )
        # relative times are read against the newest episode: yesterday is 4 June 2024
        assert await first(memory, in_may) == LAST_MAY
        assert await first(memory, yesterday) == YESTERDAY
        memory.retrieval = memory.retrieval.model_copy(update={"time_boost": 0.0})
        without = {await first(memory, in_may), await first(memory, yesterday)}
    # without the time stage the same words cannot put both episodes first
    assert without != {LAST_MAY, YESTERDAY}
