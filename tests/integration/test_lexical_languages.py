"""Lexical search alone finds Chinese and Russian memories as it finds English ones: through
the manager on the embedded stores, with no embedding model (``provider=none``), a memory is
found by a few of its words as a person types them: Chinese without spaces, Russian in another
grammatical case, English in another form."""

# Chinese and Russian text is this module's subject: its letters are meant, not confusables.
# ruff: noqa: RUF001

from __future__ import annotations

from pathlib import Path

import pytest

from memmachine import Scope, open_manager
from memmachine.config import EmbeddingSettings, Settings
from memmachine.models import FactRecord, NewMessage

#: Per language: the user's messages (the same content), then questions with a few of the
#: right message's words, each with the index of the message it must find first.
MEMORIES = {
    "en": [
        "I adopted a beagle called Toast last spring",
        "My sister teaches mathematics at a school in Lyon",
        "I am allergic to peanuts and walnuts",
        "We are planning a trip to Kyoto in October",
        "The weather was nice today",
        "I bought new running shoes for the marathon",
    ],
    "zh": [
        "去年春天我领养了一只叫吐司的小猎犬",
        "我姐姐在里昂的一所学校教数学",
        "我对花生和核桃过敏",
        "我们计划十月去京都旅行",
        "今天天气很好",
        "我为马拉松买了新跑鞋",
    ],
    "ru": [
        "Прошлой весной я взяла бигля по кличке Тост",
        "Моя сестра преподаёт математику в школе в Лионе",
        "У меня аллергия на арахис и грецкие орехи",
        "Мы планируем поездку в Киото в октябре",
        "Сегодня была хорошая погода",
        "Я купила новые кроссовки для марафона",
    ],
}
QUESTIONS = {
    "en": [("beagles", 0), ("sister teaching", 1), ("peanut allergy", 2), ("Kyoto trips", 3)],
    "zh": [("小猎犬吐司", 0), ("姐姐教书", 1), ("花生过敏", 2), ("京都旅行", 3), ("跑鞋", 5)],
    "ru": [("бигль", 0), ("сестры математика", 1), ("аллергии на арахис", 2), ("в Киото", 3),
           ("марафон", 5)],
}  # fmt: skip


@pytest.mark.parametrize("language", ["en", "zh", "ru"])
async def test_lexical_search_finds_a_memory_by_its_words_in_every_language(
    tmp_path: Path, language: str
) -> None:
    settings = Settings(data_dir=tmp_path, embedding=EmbeddingSettings(provider="none"))
    user = Scope(user_id=f"user-{language}")
    async with open_manager(settings) as memory:
        # one session each, so that no message borrows the words of the one before it
        for i, text in enumerate(MEMORIES[language]):
            await memory.add_messages(
                user.for_session(f"s{i}"), [NewMessage(content=text, producer="ann")], working=False
            )
        for question, expected in QUESTIONS[language]:
            hits = await memory.search_episodes(user, question, top_k=3)
            assert hits, question
            assert hits[0].episode.content == MEMORIES[language][expected], question


async def test_a_chinese_and_a_russian_fact_are_found_by_their_words(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, embedding=EmbeddingSettings(provider="none"))
    user = Scope(user_id="li")
    async with open_manager(settings) as memory:
        await memory.set_facts(
            user,
            [
                FactRecord(tag="宠物", feature="狗", value="一只叫豆豆的柯基犬"),
                FactRecord(tag="здоровье", feature="аллергия", value="аллергия на арахис"),
                FactRecord(tag="travel", feature="next_trip", value="Lisbon in May"),
            ],
        )
        dog = await memory.search_facts(user, "豆豆柯基", top_k=3)
        nuts = await memory.search_facts(user, "арахиса", top_k=3)
    assert [hit.fact.value for hit in dog][:1] == ["一只叫豆豆的柯基犬"]
    assert [hit.fact.value for hit in nuts][:1] == ["аллергия на арахис"]
