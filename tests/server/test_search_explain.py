"""``POST /v1/memories/search`` with ``explain`` and ``stages_off``: each stage's time, the
signals that found each hit and how each stage moved it, and stages switched off for one
search only. Run on the embedded stores and with Neo4j holding the episodes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from memmachine.config import RetrievalSettings
from memmachine.retrieval.stages import default_pipeline
from memmachine_server.app import create_app
from tests.conftest import Neo4jTarget, empty_neo4j, shared_model_dir
from tests.server.conftest import LOCAL, make_settings

pytestmark = pytest.mark.skipif(shared_model_dir() is None, reason="no local ONNX model")

USER = "ana-explain"
DOG = "I adopted a beagle called Toast last week"
CONGRATS = "Wonderful news, congratulations!"
SIT = "Two years, and he already knows how to sit."
FILLER = [
    "Tomorrow I am flying to Lisbon for a conference.",
    "Have a safe flight and enjoy Portugal.",
    "The quarterly invoice number is INV-20931.",
    "My sister works as an architect in Porto.",
]
#: Each signal brings only as many candidates as asked for, a message is indexed under its
#: own words only, and a neighbour gets its full share: so the turn after a good hit,
#: which shares no word and little meaning with the query, enters through the
#: neighbourhood stage alone.
SHALLOW = RetrievalSettings(
    min_candidates=1,
    candidates_per_result=1,
    lexical_context=0,
    context_window=0,
    neighbour_weight=1.0,
)


@pytest.fixture(scope="module", params=["embedded", "neo4j"])
def api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    extra: dict[str, Any] = {}
    target: Neo4jTarget | None = None
    if request.param == "neo4j":
        target = request.getfixturevalue("neo4j_target")
        empty_neo4j(target)
        extra = {
            "episode_store_url": SecretStr(target.url),
            "episode_store_user": target.user,
            "episode_store_password": SecretStr(target.password) if target.password else None,
        }
    settings = make_settings(tmp_path_factory.mktemp("explain"), retrieval=SHALLOW, **extra)
    try:
        with TestClient(
            create_app(settings), raise_server_exceptions=False, base_url=LOCAL
        ) as client:
            messages = [
                {"producer": "Ana", "content": DOG},
                {"role": "assistant", "producer": "Bot", "content": CONGRATS},
                *({"producer": "Ben", "content": text} for text in FILLER),
                {"producer": "Ana", "content": SIT},
            ]
            added = client.post(
                "/v1/memories", json={"user_id": USER, "session_id": "s1", "messages": messages}
            )
            assert added.status_code == 201, added.text
            yield client
    finally:
        if target is not None:
            empty_neo4j(target)


def search(api: TestClient, query: str, **extra: Any) -> dict[str, Any]:
    response = api.post(
        "/v1/memories/search",
        json={"user_id": USER, "query": query, "types": ["episodic"], **extra},
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def hits(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {hit["content"]: hit for hit in body["episodic"]}


def test_explain_times_every_stage_in_order_and_marks_those_that_did_not_run(
    api: TestClient,
) -> None:
    body = search(api, "What dog did Ana adopt?", top_k=2, explain=True)
    stages = body["explain"]["stages"]
    assert [stage["name"] for stage in stages] == ["embed_query", *default_pipeline().names()]
    ran = {stage["name"]: stage["ran"] for stage in stages}
    # on by default: the candidates, their fusion, the speaker boost for "Ana", the
    # neighbourhood and the ranking; off by default: recency, importance, no reranker
    assert ran["candidates"]
    assert ran["fusion"]
    assert ran["ranking"]
    assert ran["speaker_boost"]
    assert ran["neighbourhood"]
    assert not ran["recency"]
    assert not ran["importance"]
    assert not ran["rerank"]
    assert not ran["expansion"]  # expand_context is 0
    assert all(stage["seconds"] >= 0 and not stage["switched_off"] for stage in stages)
    assert all(stage["seconds"] == 0 for stage in stages if not stage["ran"])
    fixed = {stage["name"] for stage in stages if not stage["switchable"]}
    assert fixed == {"embed_query", "candidates", "fusion", "ranking"}


def test_each_hit_names_the_signals_that_found_it_and_the_steps_that_moved_it(
    api: TestClient,
) -> None:
    body = search(api, "What dog did Ana adopt?", top_k=2, explain=True)
    found = hits(body)
    dog = found[DOG]["explain"]
    assert dog["entered"] == "fusion"
    assert {"dense", "lexical"} <= set(dog["sources"])
    steps = {step["stage"]: step for step in dog["steps"]}
    assert steps["fusion"]["rank_before"] is None
    assert steps["fusion"]["rank_after"] == 1
    # Ana is named in the query and said it: the speaker boost's factor is on this hit
    assert steps["speaker_boost"]["boost"] == pytest.approx(1.5)
    assert steps["ranking"]["score_after"] == pytest.approx(found[DOG]["score"], abs=1e-5)
    # a turn next to the best hit that neither signal brought: found by the neighbourhood
    neighbours = [hit for hit in body["episodic"] if hit["explain"]["sources"] == ["neighbour"]]
    assert neighbours, body["episodic"]
    for hit in neighbours:
        assert hit["explain"]["entered"] == "neighbourhood"
        first = hit["explain"]["steps"][0]
        assert first["stage"] == "neighbourhood"
        assert first["rank_before"] is None
        assert hit["ranks"] == {"neighbour": 1}


def test_a_stage_switched_off_changes_that_search_only(api: TestClient) -> None:
    query = "What dog did Ana adopt?"
    normal = search(api, query, top_k=2, explain=True)
    brought = {
        hit["content"] for hit in normal["episodic"] if hit["explain"]["sources"] == ["neighbour"]
    }
    assert brought

    off = search(api, query, top_k=2, explain=True, stages_off=["neighbourhood"])
    assert brought.isdisjoint(hits(off))
    assert all("neighbour" not in hit["ranks"] for hit in off["episodic"])
    [neighbourhood] = [s for s in off["explain"]["stages"] if s["name"] == "neighbourhood"]
    assert neighbourhood == {
        "name": "neighbourhood",
        "ran": False,
        "switched_off": True,
        "seconds": 0.0,
        "switchable": True,
    }

    # nothing is kept: the next search without stages_off is the normal one again
    again = search(api, query, top_k=2)
    assert [hit["id"] for hit in again["episodic"]] == [hit["id"] for hit in normal["episodic"]]


def test_switching_off_a_boost_takes_its_factor_out_of_the_scores(api: TestClient) -> None:
    query = "What dog did Ana adopt?"
    boosted = search(api, query, top_k=3, explain=True)
    for hit in boosted["episodic"]:
        boosts = {s["stage"]: s["boost"] for s in hit["explain"]["steps"] if s["boost"]}
        # Ana is named in the query: her turns, and only hers, get the speaker boost
        assert boosts == ({"speaker_boost": pytest.approx(1.5)} if hit["producer"] == "Ana" else {})
    plain = search(api, query, top_k=3, explain=True, stages_off=["speaker_boost"])
    for hit in plain["episodic"]:
        assert all(step["boost"] is None for step in hit["explain"]["steps"])
    assert hits(boosted)[DOG]["explain"]["steps"] != hits(plain)[DOG]["explain"]["steps"]


def test_expansion_hits_are_attributed_to_the_expansion(api: TestClient) -> None:
    body = search(api, "INV-20931", top_k=1, expand_context=1, explain=True)
    [hit, *context] = body["episodic"]
    assert "INV-20931" in hit["content"]
    assert context
    assert all(extra["context"] for extra in context)
    for extra in context:
        assert extra["explain"]["sources"] == ["expansion"]
        assert extra["explain"]["entered"] == "expansion"


def test_without_explain_nothing_is_added(api: TestClient) -> None:
    body = search(api, "What dog did Ana adopt?", top_k=2, stages_off=["neighbourhood"])
    assert body["explain"] is None
    assert all(hit["explain"] is None for hit in body["episodic"])


@pytest.mark.parametrize(
    ("stages_off", "says"),
    [
        (["fusion"], "essential"),
        (["candidates"], "essential"),
        (["ranking"], "essential"),
        (["no_such_stage"], "is not a stage"),
        (["Neighbourhood"], "pattern"),
        (["neighbourhood; DROP"], "pattern"),
        ("neighbourhood", "list"),
    ],
)
def test_a_stage_that_cannot_be_switched_off_is_a_422_naming_the_field(
    api: TestClient, stages_off: object, says: str
) -> None:
    response = api.post(
        "/v1/memories/search",
        json={"user_id": USER, "query": "dog", "stages_off": stages_off},
    )
    assert response.status_code == 422, response.text
    body = response.json()
    assert "Traceback" not in response.text
    assert "stages_off" in response.text
    assert says in response.text.lower() or says in str(body)
