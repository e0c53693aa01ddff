"""The ``categories`` stage on the real embedded stores: a turn naming a member of the
category the question asks about ("surfing" for "sports"), with no word in common with the
question, is found once a WordNet directory is configured; the list is the same whether the
store scans or the in-process index answers; a directory it cannot use stops startup."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from memmachine import Scope, open_manager
from memmachine.adapters.falkordb.falkordb_episode_store import FalkorDBEpisodeStore
from memmachine.adapters.indexed.indexed_episode_store import IndexedEpisodeStore
from memmachine.bootstrap import build_manager
from memmachine.config import EmbeddingSettings, RetrievalSettings, Settings
from memmachine.errors import ConfigurationError
from memmachine.models import EpisodeRecord
from memmachine.ports import EpisodeStore
from memmachine.retrieval.categories import Categories
from memmachine.retrieval.pipeline import Search
from memmachine.retrieval.wordnet import load_lexicon
from tests.integration.test_indexed_episode_store import graph, server

# full text alone decides, so the tests read off what the stage adds
from tests.integration.test_retrieval_feedback import LEXICAL_ONLY, T0, say
from tests.wordnet_fixture import SPORTS, write_wordnet

__all__ = ["graph", "server"]

QUESTION = "What sports do you like besides basketball?"
FOUND = [
    ("John", "Basketball practice ran late again."),
    ("John", "I like the new basketball court downtown."),
    ("Maria", "John, do you like the cafe by the court?"),
]
#: The evidence: a member of "sport", no word in common with the question (the indexed text
#: holds the speaker's name, so the question names nobody).
EVIDENCE = ("John", "Had an awesome summer surfing and riding the waves.")
#: A member of another sense of "sport" (a mutation): only all senses reach it.
OTHER_SENSE = ("Maria", "The tulip showed a mutation this spring.")
UNRELATED = ("Maria", "Lost my keys at the bank.")


def settings(tmp_path: Path, lexicon_dir: Path | None, **tuning: object) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        embedding=EmbeddingSettings(provider="none"),
        retrieval=RetrievalSettings(**LEXICAL_ONLY, lexicon_dir=lexicon_dir, **tuning),
    )


async def search_twice(
    memory_settings: Settings, question: str = QUESTION
) -> tuple[list[str], list[str], dict[str, int]]:
    """The contents found with the stage's weight at 0 and at 0.3, and the evidence's ranks."""
    async with open_manager(memory_settings) as memory:
        scope = Scope(user_id="u", session_id="s1")
        await memory.add_messages(scope, say([*FOUND, UNRELATED], 0), working=False)
        later = Scope(user_id="u", session_id="s2")
        await memory.add_messages(later, say([EVIDENCE, OTHER_SENSE], 10), working=False)
        memory.retrieval = memory.retrieval.model_copy(update={"category_weight": 0.0})
        off = await memory.search_episodes(Scope(user_id="u"), question, top_k=8)
        memory.retrieval = memory.retrieval.model_copy(update={"category_weight": 0.3})
        on = await memory.search_episodes(Scope(user_id="u"), question, top_k=8)
    ranks = next((hit.ranks for hit in on if hit.episode.content == EVIDENCE[1]), {})
    assert all(0.0 < hit.score <= 1.0 for hit in on)
    return [h.episode.content for h in off], [h.episode.content for h in on], ranks


async def test_a_turn_naming_a_member_of_the_asked_category_is_found(tmp_path: Path) -> None:
    wordnet = write_wordnet(tmp_path / "wordnet")
    off, on, ranks = await search_twice(settings(tmp_path, wordnet, category_senses=1))
    assert EVIDENCE[1] not in off
    assert EVIDENCE[1] in on
    assert set(ranks) == {"categories"}
    assert OTHER_SENSE[1] not in on  # the first sense only: a mutation is no sport
    assert UNRELATED[1] not in on
    # the turns the question's own words found keep their lead
    assert set(on[:2]) == set(off[:2])


async def test_every_sense_reaches_further(tmp_path: Path) -> None:
    wordnet = write_wordnet(tmp_path / "wordnet")
    _, on, _ = await search_twice(settings(tmp_path, wordnet, category_senses=0))
    assert EVIDENCE[1] in on
    assert OTHER_SENSE[1] in on


async def test_only_questions_asking_for_several_things_by_default(tmp_path: Path) -> None:
    wordnet = write_wordnet(tmp_path / "wordnet")
    statement = "Tell me about sports besides basketball"  # no list asked for
    off, on, _ = await search_twice(settings(tmp_path / "a", wordnet), statement)
    assert on == off
    _, on, _ = await search_twice(
        settings(tmp_path / "b", wordnet, category_lists_only=False), statement
    )
    assert EVIDENCE[1] in on


async def test_only_the_phrase_a_list_question_asks_for_when_asked(tmp_path: Path) -> None:
    wordnet = write_wordnet(tmp_path / "wordnet")
    asked = settings(tmp_path / "a", wordnet, category_senses=1, category_asked_only=True)
    _, on, ranks = await search_twice(asked)
    assert EVIDENCE[1] in on  # "What sports do ..." asks for sports
    assert set(ranks) == {"categories"}
    # the same category, not as the thing the question asks for: no list
    statement = "Tell me about sports besides basketball"
    off, on, _ = await search_twice(
        settings(tmp_path / "b", wordnet, category_asked_only=True), statement
    )
    assert EVIDENCE[1] not in on
    assert on == off


async def test_without_a_wordnet_directory_the_stage_does_not_run(tmp_path: Path) -> None:
    off, on, _ = await search_twice(settings(tmp_path, None))
    assert off == on
    assert EVIDENCE[1] not in on


@pytest.mark.parametrize("broken", ["missing", "not wordnet"])
async def test_a_wordnet_directory_it_cannot_read_stops_startup(
    tmp_path: Path, broken: str
) -> None:
    wordnet = tmp_path / "wordnet"
    if broken == "not wordnet":
        write_wordnet(wordnet)
        (wordnet / "data.noun").write_text("this is not WordNet\n")
    with pytest.raises(ConfigurationError, match="MEMMACHINE_RETRIEVAL_LEXICON_DIR"):
        await build_manager(settings(tmp_path, wordnet))


async def members_list(store: EpisodeStore, lexicon_dir: Path) -> dict[str, float]:
    """What the stage adds to each hit's fused score, searched on ``store``."""
    scope = Scope(tenant="t", user_id="john", session_id="s0")
    search = Search(
        scope=scope,
        query=QUESTION,
        top_k=10,
        expand_context=0,
        query_vector=None,
        store=store,
        embedder=None,
        reranker=None,
        tuning=RetrievalSettings(category_weight=0.3, category_senses=1, distinct_evidence=False),
    )
    first = (await store.fulltext_search(scope, "basketball", 1))[0][0]
    search.by_id[first.id], search.scores[first.id] = first, 1.0  # one candidate found
    stage = Categories(load_lexicon(lexicon_dir))
    assert stage.applies(search)
    assert len(stage.members(search)) > 32  # more than one full-text query holds
    await stage.run(search)
    return {key: score - (1.0 if key == first.id else 0.0) for key, score in search.scores.items()}


async def test_store_scan_and_index_fuse_the_members_list_alike(
    server: str, graph: str, tmp_path: Path
) -> None:
    wordnet = write_wordnet(tmp_path / "wordnet")
    plain = FalkorDBEpisodeStore(server, graph_name=graph, embedding_dimensions=None)
    await plain.start()
    index = IndexedEpisodeStore(plain, min_episodes=0, load_inline=10**9)
    await index.start()
    scope = Scope(tenant="t", user_id="john", session_id="s0")
    # turns naming one, two or three of the members, some in both halves of the query
    texts = ["basketball again"] + [
        " ".join(SPORTS[(n * 7 + j) % len(SPORTS)] for j in range(1 + n % 3)) + f" day {n}"
        for n in range(40)
    ]
    records = [
        EpisodeRecord(
            id=f"e{n}",
            role="user",
            producer="John",
            content=text,
            timestamp=T0 + timedelta(minutes=n),
            search_text=text,
        )
        for n, text in enumerate(texts)
    ]
    try:
        await plain.add_episodes(scope, records)
        by_store = await members_list(plain, wordnet)
        by_index = await members_list(index, wordnet)
    finally:
        await index.close()
    assert by_store.keys() == by_index.keys()
    assert len(by_store) > 10
    for key, share in by_store.items():
        assert by_index[key] == pytest.approx(share, abs=1e-9), key
    # a turn naming three members ranks above one naming one: the parts' scores are added
    three = max(by_store[f"e{n}"] for n in range(1, 41) if (n - 1) % 3 == 2)
    one = min(by_store.get(f"e{n}", 0.0) for n in range(1, 41) if (n - 1) % 3 == 0)
    assert three > one
