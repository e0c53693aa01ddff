"""The rerank stage of episode search, through the real app on the embedded stores.

The reranker here is a stand-in for a cross-encoder at the model-provider edge: it reads
each text it is given and scores it by the tag words (``m0``, ``m1``, ...) it finds there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memmachine.bootstrap import build_manager
from memmachine.config import EmbeddingSettings, RerankerSettings, RetrievalSettings, Settings
from memmachine.errors import StoreError
from memmachine.manager import MemoryManager
from memmachine.models import RerankerStatus
from memmachine.retrieval import episode_search_text
from memmachine.telemetry import Telemetry
from memmachine_server.app import create_app
from tests.server.conftest import LOCAL, AppFactory, make_settings

USER = "rr"
POOL = 8


class TagReranker:
    """Scores a text by ``relevance[tag]`` for every tag word in it (0 when none)."""

    name = "reranker"
    model = "tag-reranker"

    def __init__(self) -> None:
        self.relevance: dict[str, float] = {}
        self.calls: list[tuple[str, list[str]]] = []
        self.fail = False
        self.drop_one = False
        self.started = 0
        self.closed = 0

    async def start(self) -> None:
        self.started += 1

    async def close(self) -> None:
        self.closed += 1

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        self.calls.append((query, list(texts)))
        if self.fail:
            raise StoreError("the reranker model crashed", store="reranker")
        scores = [
            sum(self.relevance.get(word, 0.0) for word in text.replace(":", " ").split())
            for text in texts
        ]
        return scores[1:] if self.drop_one else scores


@pytest.fixture
def reranker() -> TagReranker:
    return TagReranker()


@pytest.fixture
def client(tmp_path: Path, reranker: TagReranker) -> Iterator[TestClient]:
    """A lexical-only app (the fused order is the full-text order) whose manager reranks the
    best ``POOL`` fused hits with ``reranker``; it holds 12 notes, all matching "harbour"."""

    async def factory(settings: Settings, *, telemetry: Telemetry | None = None) -> MemoryManager:
        manager = await build_manager(settings, telemetry=telemetry)
        manager.reranker = reranker
        manager.reranker_status = RerankerStatus(enabled=True, model=reranker.model)
        return manager

    settings = make_settings(
        tmp_path,
        embedding=EmbeddingSettings(provider="none"),
        retrieval=RetrievalSettings(rerank_candidates=POOL),
    )
    with TestClient(
        create_app(settings, manager_factory=factory),
        raise_server_exceptions=False,
        base_url=LOCAL,
    ) as api:
        response = api.post(
            "/v1/memories",
            json={
                "user_id": USER,
                "session_id": "s1",
                "messages": [
                    {"content": f"harbour note {'about ' * (i % 3)}m{i}", "producer": "ana"}
                    for i in range(12)
                ],
            },
        )
        assert response.status_code == 201, response.text
        yield api
    assert reranker.closed >= 1


def hits(api: TestClient, top_k: int) -> list[dict[str, Any]]:
    response = api.post(
        "/v1/memories/search",
        json={"user_id": USER, "query": "harbour", "top_k": top_k, "types": ["episodic"]},
    )
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["episodic"]
    return found


def tag(hit: dict[str, Any]) -> str:
    return str(hit["content"].split()[-1])


def fused_order(api: TestClient) -> list[str]:
    """The tags in fused order, from a search with the reranker switched off."""
    manager: MemoryManager = api.app.state.memmachine.manager  # type: ignore[attr-defined]
    reranker, manager.reranker = manager.reranker, None
    try:
        found = hits(api, 12)
    finally:
        manager.reranker = reranker
    assert all("rerank" not in hit["ranks"] for hit in found)
    return [tag(hit) for hit in found]


def test_reranker_reorders_the_fused_pool_and_cuts_to_top_k(
    client: TestClient, reranker: TagReranker
) -> None:
    fused = fused_order(client)
    assert len(fused) == 12
    # Lifted from 6th place (inside the pool of 8), and 2nd best from 3rd place; the 10th
    # fused hit is never scored, however relevant the reranker would find it.
    reranker.relevance = {fused[5]: 3.0, fused[2]: 1.0, fused[9]: 9.0}

    found = hits(client, 3)

    assert [tag(hit) for hit in found] == [fused[5], fused[2], fused[0]]
    assert [hit["ranks"]["rerank"] for hit in found] == [1, 2, 3]
    assert all("fulltext" in hit["ranks"] for hit in found)
    # min-max of the reranker's scores over the pool: best 1.0, unscored pool members 0.0
    assert [hit["score"] for hit in found] == pytest.approx([1.0, 1 / 3, 0.0])
    query, texts = reranker.calls[-1]
    assert query == "harbour"
    assert len(texts) == POOL
    # each indexed text ends with its tag; compare whole tags ("m1" is inside "m10")
    assert fused[9] not in {text.split()[-1] for text in texts}


def test_reranker_sees_the_indexed_text_of_each_episode(
    client: TestClient, reranker: TagReranker
) -> None:
    top = hits(client, 1)[0]

    expected = episode_search_text(
        top["content"],
        timestamp=datetime.fromisoformat(top["timestamp"]),
        producer=top["producer"],
        role=top["role"],
    )
    assert reranker.calls[-1][1][0] == expected
    assert expected.endswith(f"ana: {top['content']}")


def test_equal_reranker_scores_keep_the_fused_order(
    client: TestClient, reranker: TagReranker
) -> None:
    fused = fused_order(client)
    reranker.relevance = {}  # every text scores 0

    found = hits(client, 5)

    assert [tag(hit) for hit in found] == fused[:5]
    assert [hit["ranks"]["rerank"] for hit in found] == [1, 2, 3, 4, 5]
    assert [hit["score"] for hit in found] == [1.0] * 5


def test_top_k_above_the_pool_reranks_top_k_hits(client: TestClient, reranker: TagReranker) -> None:
    fused = fused_order(client)
    reranker.relevance = {fused[10]: 2.0}

    found = hits(client, 11)

    assert len(reranker.calls[-1][1]) == 11
    assert [tag(hit) for hit in found] == [fused[10], *fused[:10]]


def test_a_failing_reranker_is_a_503_and_health_names_it(
    client: TestClient, reranker: TagReranker
) -> None:
    health = client.get("/health").json()
    assert health["reranker"] == {"enabled": True, "model": "tag-reranker", "reason": None}
    assert reranker.started == 1

    reranker.fail = True
    response = client.post("/v1/memories/search", json={"user_id": USER, "query": "harbour"})
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "store_error"
    assert "reranker" in error["message"]
    assert "crashed" not in response.text

    reranker.fail, reranker.drop_one = False, True
    response = client.post("/v1/memories/search", json={"user_id": USER, "query": "harbour"})
    assert response.status_code == 503


def test_health_says_when_there_is_no_reranker(app_factory: AppFactory) -> None:
    api = app_factory(embedding=EmbeddingSettings(provider="none"))
    reranker = api.get("/health").json()["reranker"]
    assert reranker["enabled"] is False
    assert "MEMMACHINE_RERANKER_MODEL" in reranker["reason"]


def test_a_reranker_that_cannot_load_leaves_search_working(
    app_factory: AppFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "no-such-cross-encoder"
    with caplog.at_level(logging.WARNING, logger="memmachine.bootstrap"):
        api = app_factory(
            embedding=EmbeddingSettings(provider="none"),
            reranker=RerankerSettings(model=str(missing)),
        )
    status = api.get("/health").json()["reranker"]
    assert status["enabled"] is False
    assert "could not start" in status["reason"]
    assert any("not reranked" in record.getMessage() for record in caplog.records)
    api.post(
        "/v1/memories",
        json={"user_id": "nl", "session_id": "s", "messages": [{"content": "harbour"}]},
    )
    response = api.post("/v1/memories/search", json={"user_id": "nl", "query": "harbour"})
    assert response.status_code == 200
    assert "rerank" not in response.json()["episodic"][0]["ranks"]
