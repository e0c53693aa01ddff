"""build_embedder / choose_embedder: settings in, an embedder (or the reason for none) out."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import numpy as np
import pytest
from pydantic import SecretStr

from memmachine.adapters.onnx.onnx_embedder import OnnxEmbedder
from memmachine.adapters.openai.openai_embedder import OpenAIEmbedder
from memmachine.adapters.torch.sentence_transformers_embedder import SentenceTransformersEmbedder
from memmachine.bootstrap import build_manager
from memmachine.bootstrap.embedders import build_embedder, choose_embedder
from memmachine.config import EmbeddingSettings, Settings


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test here may reach a hub, whatever the environment says."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_provider_none_is_disabled() -> None:
    choice = choose_embedder(EmbeddingSettings(provider="none"))
    assert choice.embedder is None
    assert choice.reason is not None
    assert "disabled" in choice.reason
    status = choice.status()
    assert not status.enabled
    assert status.reason == choice.reason
    assert build_embedder(EmbeddingSettings(provider="none")) is None


@pytest.mark.parametrize("model", ["/no/such/model/dir", "someone/some-model"])
def test_local_model_missing_means_lexical_only(
    model: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = EmbeddingSettings(provider="local", model=model, cache_dir=tmp_path / "cache")
    with caplog.at_level(logging.WARNING, logger="memmachine.bootstrap.embedders"):
        choice = choose_embedder(settings)
    assert choice.embedder is None
    assert choice.reason is not None
    assert "lexical-only" in choice.reason
    assert "MEMMACHINE_EMBEDDING_MODEL" in choice.reason
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "lexical-only" in warnings[0].getMessage()
    assert not choice.status().enabled
    assert build_embedder(settings) is None


async def test_local_model_dir_gives_a_working_embedder(model_dir: Path, tmp_path: Path) -> None:
    settings = EmbeddingSettings(
        provider="local",
        model=str(model_dir),
        onnx_file="onnx/model_qint8.onnx",
        batch_size=8,
        cache_dir=tmp_path,
    )
    choice = choose_embedder(settings)
    embedder = choice.embedder
    assert isinstance(embedder, OnnxEmbedder)
    assert choice.reason is None
    assert embedder.loaded
    assert embedder.batch_size == 8
    # The ONNX file is part of the name: its vectors live in another space than model.onnx's.
    assert embedder.model == f"{model_dir.name} [onnx/model_qint8.onnx]"
    status = choice.status()
    assert status.enabled
    assert status.dimensions == 384
    tea, drink = await embedder.embed(["I love green tea", "Green tea is my favourite drink"])
    assert len(tea) == 384
    assert float(np.dot(tea, drink)) > 0.8
    await embedder.close()
    # A local directory is used in place, never copied into the cache: the cache holds at
    # most the mask-free rewrite of its ONNX file (onnx_unmasked), none of its own files.
    cached = await asyncio.to_thread(lambda: [p.name for p in tmp_path.iterdir()])
    assert cached in ([], ["unmasked"])


async def test_openai_provider_is_built_but_not_started() -> None:
    settings = EmbeddingSettings(
        provider="openai",
        model="text-embedding-3-small",
        base_url="http://127.0.0.1:9/v1",
        api_key=SecretStr("sk-secret-key"),
        dimensions=256,
        batch_size=32,
        request_timeout_seconds=5,
    )
    choice = choose_embedder(settings)
    embedder = choice.embedder
    assert isinstance(embedder, OpenAIEmbedder)
    assert embedder.model == "text-embedding-3-small"
    assert embedder.dimensions == 256
    assert embedder.batch_size == 32
    assert embedder.base_url == "http://127.0.0.1:9/v1"
    assert choice.status().dimensions == 256
    await embedder.close()


def test_torch_provider_is_chosen_by_the_environment_and_built_but_not_started(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MEMMACHINE_EMBEDDING_PROVIDER", "torch")
    monkeypatch.setenv("MEMMACHINE_EMBEDDING_MODEL", "sentence-transformers/all-mpnet-base-v2")
    monkeypatch.setenv("MEMMACHINE_EMBEDDING_DEVICE", "cuda:1")
    monkeypatch.setenv("MEMMACHINE_EMBEDDING_BATCH_SIZE", "16")
    choice = choose_embedder(EmbeddingSettings())
    embedder = choice.embedder
    assert isinstance(embedder, SentenceTransformersEmbedder)
    assert embedder.model == "sentence-transformers/all-mpnet-base-v2"
    assert (embedder.device, embedder.batch_size, embedder.dimensions) == ("cuda:1", 16, 0)


async def test_a_torch_embedder_that_cannot_start_leaves_search_lexical_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        embedding=EmbeddingSettings(provider="torch", model=str(tmp_path / "no-model")),
    )
    with caplog.at_level(logging.WARNING, logger="memmachine.bootstrap"):
        manager = await build_manager(settings)  # wired, not started: nothing connects
    try:
        assert manager.embedder is None
        assert manager.embedder_status.reason is not None
        assert "could not start" in manager.embedder_status.reason
        assert any("lexical-only" in record.getMessage() for record in caplog.records)
    finally:
        await manager.close()


def test_reranker_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().reranker.model is None
    monkeypatch.setenv("MEMMACHINE_RERANKER_MODEL", "cross-encoder/ms-marco-MiniLM-L6-v2")
    monkeypatch.setenv("MEMMACHINE_RERANKER_DEVICE", "cpu")
    monkeypatch.setenv("MEMMACHINE_RETRIEVAL_RERANK_CANDIDATES", "50")
    settings = Settings()
    assert settings.reranker.model == "cross-encoder/ms-marco-MiniLM-L6-v2"
    assert settings.reranker.device == "cpu"
    assert settings.retrieval.rerank_candidates == 50


async def test_int8_is_chosen_by_the_environment_and_cached(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMMACHINE_EMBEDDING_QUANTIZE", "int8")
    monkeypatch.setenv("MEMMACHINE_EMBEDDING_WORKERS", "2")
    monkeypatch.setenv("MEMMACHINE_EMBEDDING_QUERY_CACHE_SIZE", "7")
    settings = EmbeddingSettings(provider="local", model=str(model_dir), cache_dir=tmp_path)
    choice = choose_embedder(settings)
    embedder = choice.embedder
    assert isinstance(embedder, OnnxEmbedder)
    assert embedder.loaded
    assert (embedder.quantize, embedder.workers, embedder.query_cache_size) == ("int8", 2, 7)
    assert choice.status().model == f"{model_dir.name} [int8]"
    assert len(list((tmp_path / "int8").rglob("*.onnx"))) == 1
    tea, drink = await embedder.embed(["I love green tea", "Green tea is my favourite drink"])
    assert float(np.dot(tea, drink)) > 0.85
    await embedder.close()
