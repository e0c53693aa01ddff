"""OpenAIEmbedder against a scripted OpenAI-compatible server on loopback."""

from __future__ import annotations

import math
import socket
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from memmachine.adapters.openai.openai_embedder import OpenAIEmbedder
from memmachine.errors import StoreError
from memmachine.ports import Embedder
from tests.fakes.embedding_server import DIMS, FakeOpenAI, raw_vector, unit

API_KEY = "sk-test-0123456789-secret"


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()


def make(server: FakeOpenAI, **kw: Any) -> OpenAIEmbedder:
    kw.setdefault("api_key", API_KEY)
    kw.setdefault("retry_backoff", 0.01)
    return OpenAIEmbedder(server.base_url, "text-embedding-test", **kw)


async def test_vectors_in_order_normalised_and_authorised(server: FakeOpenAI) -> None:
    emb = make(server)
    assert isinstance(emb, Embedder)
    texts = [f"text number {i}" for i in range(12)]
    vectors = await emb.embed(texts)
    assert len(vectors) == 12
    for text, vector in zip(texts, vectors, strict=True):
        assert math.isclose(float(np.linalg.norm(vector)), 1.0, abs_tol=1e-9)
        np.testing.assert_allclose(vector, unit(raw_vector(text)), atol=1e-9)
    (request,) = server.requests
    assert request["headers"]["Authorization"] == f"Bearer {API_KEY}"
    assert request["body"] == {"model": "text-embedding-test", "input": texts}
    assert emb.dimensions == DIMS
    assert emb.name == "embedder"
    assert emb.model == "text-embedding-test"
    assert API_KEY not in repr(emb)
    await emb.close()
    await emb.close()
    with pytest.raises(StoreError, match="closed"):
        await emb.embed(["after close"])
    await emb.start()  # reopens
    assert len(await emb.embed(["again"])) == 1
    await emb.close()


async def test_batches(server: FakeOpenAI) -> None:
    emb = make(server, batch_size=4)
    texts = [f"t{i}" for i in range(10)]
    vectors = await emb.embed(texts)
    assert [len(batch) for batch in server.inputs] == [4, 4, 2]  # ceil(10 / 4) requests
    assert [text for batch in server.inputs for text in batch] == texts
    np.testing.assert_allclose(vectors[9], unit(raw_vector("t9")), atol=1e-9)
    await emb.close()


async def test_empty_input_and_empty_text(server: FakeOpenAI) -> None:
    emb = make(server)
    assert await emb.embed([]) == []
    assert server.requests == []
    (vector,) = await emb.embed([""])
    assert server.inputs == [[" "]]
    assert len(vector) == DIMS
    await emb.close()


async def test_429_then_success(server: FakeOpenAI) -> None:
    server.failures = [429]
    server.retry_after = "0"
    emb = make(server, retry_backoff=5.0)  # Retry-After: 0 wins over the long backoff
    vectors = await emb.embed(["a", "b"])
    assert len(server.requests) == 2
    np.testing.assert_allclose(vectors[1], unit(raw_vector("b")), atol=1e-9)
    await emb.close()


async def test_5xx_and_backoff_then_success(server: FakeOpenAI) -> None:
    server.failures = [502, 503]
    emb = make(server)
    assert len(await emb.embed(["a"])) == 1
    assert len(server.requests) == 3
    await emb.close()


async def test_500_forever_gives_up(server: FakeOpenAI) -> None:
    server.always = 500
    emb = make(server, max_retries=2)
    with pytest.raises(StoreError) as info:
        await emb.embed(["a"])
    assert len(server.requests) == 3  # one try + two retries
    error = info.value
    assert error.store == "embedder"
    assert "500" in error.message
    assert API_KEY not in error.message
    assert API_KEY not in str(error)
    await emb.close()


async def test_401_is_not_retried_and_hides_the_key(server: FakeOpenAI) -> None:
    server.always = 401
    emb = make(server)
    with pytest.raises(StoreError, match="401") as info:
        await emb.embed(["a"])
    assert len(server.requests) == 1
    assert "MEMMACHINE_EMBEDDING_API_KEY" in info.value.message
    assert API_KEY not in info.value.message
    assert "0123456789" not in info.value.message
    await emb.close()


async def test_long_retry_after_fails_at_once(server: FakeOpenAI) -> None:
    server.always = 429
    server.retry_after = "120"
    emb = make(server)
    with pytest.raises(StoreError, match=r"429.*retry after 120s"):
        await emb.embed(["a"])
    assert len(server.requests) == 1
    await emb.close()


async def test_dimensions_discovered_by_start(server: FakeOpenAI) -> None:
    emb = make(server)
    assert emb.dimensions == 0
    await emb.start()
    assert emb.dimensions == DIMS
    assert len(server.requests) == 1
    assert "dimensions" not in server.requests[0]["body"]
    await emb.close()


async def test_configured_dimensions_are_sent_and_need_no_probe(server: FakeOpenAI) -> None:
    async with make(server, dimensions=5) as emb:
        assert server.requests == []
        assert emb.dimensions == 5
        (vector,) = await emb.embed(["x"])
        assert len(vector) == 5
        assert server.requests[0]["body"]["dimensions"] == 5


async def test_malformed_answer(server: FakeOpenAI) -> None:
    server.drop_one = True
    emb = make(server)
    with pytest.raises(StoreError, match="1 embeddings for 2 inputs"):
        await emb.embed(["a", "b"])
    await emb.close()


async def test_no_api_key_sends_no_authorization(server: FakeOpenAI) -> None:
    emb = make(server, api_key=None)
    await emb.embed(["a"])
    assert "Authorization" not in server.requests[0]["headers"]
    await emb.close()


async def test_unreachable_endpoint() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    emb = OpenAIEmbedder(
        f"http://127.0.0.1:{port}/v1", "m", api_key=API_KEY, max_retries=1, retry_backoff=0.01
    )
    with pytest.raises(StoreError, match="unreachable") as info:
        await emb.start()
    assert info.value.store == "embedder"
    await emb.close()
