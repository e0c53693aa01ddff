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
from memmachine.models import NewMessage

USER = Scope(user_id="u")
#: The episode from last May, from yesterday and from today (the newest: "now" for search).
LAST_MAY = datetime(2023, 5, 20, 12, 0, tzinfo=UTC)
YESTERDAY = datetime(2024, 6, 4, 12, 0, tzinfo=UTC)
TODAY = datetime(2024, 6, 5, 12, 0, tzinfo=UTC)

# The same words at three times (a colour apart: a message said twice would be one memory).
# Today's is the shortest, so that without the time it ranks first. A Latin brand name is
# what the three languages' questions share with the episodes word for word, whatever the
# analyser makes of the rest.
EPISODES = {
    "en": ("I bought a red kettle at IKEA", "I bought a blue kettle at IKEA", "kettle at IKEA"),
    "zh": ("我在 IKEA 买了一个红水壶", "我在 IKEA 买了一个蓝水壶", "IKEA 水壶"),
    "ru": ("Я купил красный чайник в IKEA", "Я купил синий чайник в IKEA", "Я купил чайник в IKEA"),
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


@pytest.mark.parametrize(
    ("language", "query", "when", "first_without"),
    [
        # an episode's indexed text holds its date in English words: "May" matches it word
        # for word even without the time stage, 去年五月 and «в мае» do not
        ("en", "What did I buy at IKEA in May last year?", LAST_MAY, LAST_MAY),
        ("zh", "我去年五月在 IKEA 买了什么？", LAST_MAY, TODAY),
        ("ru", "Что я купил в IKEA в мае прошлого года?", LAST_MAY, TODAY),
        ("en", "What did I buy at IKEA yesterday?", YESTERDAY, TODAY),
        ("zh", "我昨天在 IKEA 买了什么？", YESTERDAY, TODAY),
        ("ru", "Что я купил в IKEA вчера?", YESTERDAY, TODAY),
    ],
)
async def test_the_episode_from_the_time_a_question_names_ranks_first(
    tmp_path: Path, language: str, query: str, when: datetime, first_without: datetime
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        embedding=EmbeddingSettings(provider="none"),
        retrieval=RetrievalSettings(**ONLY_TIME),
    )
    async with open_manager(settings) as memory:
        moments = (("may", LAST_MAY), ("yesterday", YESTERDAY), ("today", TODAY))
        for (session, moment), content in zip(moments, EPISODES[language], strict=True):
            message = NewMessage(content=content, producer="ann", timestamp=moment)
            await memory.add_messages(
                Scope(user_id="u", session_id=session), [message], working=False
            )
        on = await memory.search_episodes(USER, query, top_k=3)
        memory.retrieval = memory.retrieval.model_copy(update={"time_boost": 0.0})
        off = await memory.search_episodes(USER, query, top_k=3)
    assert len(on) == 3
    assert on[0].episode.timestamp == when
    # without the time stage the shortest ranks first
    assert off[0].episode.timestamp == first_without
