"""The torch adapters (the server's ``gpu`` extra) on tiny, randomly initialised models.

No model hub is reached: each model is a one-layer BERT built here with the MiniLM WordPiece
vocabulary and saved to a temporary directory. The tests run on the CPU; without torch and
sentence-transformers installed (the default install) they are skipped, except the one that
checks what a missing torch says.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from memmachine.adapters.torch.cross_encoder_reranker import CrossEncoderReranker
from memmachine.adapters.torch.sentence_transformers_embedder import SentenceTransformersEmbedder
from memmachine.adapters.torch.torch_runtime import device_report
from memmachine.bootstrap import open_manager
from memmachine.config import EmbeddingSettings, RerankerSettings, Settings
from memmachine.errors import ConfigurationError, StoreError
from memmachine.models import NewMessage, Scope
from memmachine.ports import Embedder, Reranker
from tests.conftest import REPO_ROOT

#: Only the tokenizer files of this directory are used (its WordPiece vocabulary).
TOKENIZER_DIR = REPO_ROOT.parent / "shared" / "models" / "all-MiniLM-L6-v2"
HAVE_TORCH = all(
    importlib.util.find_spec(name) is not None for name in ("torch", "sentence_transformers")
)
needs_torch = pytest.mark.skipif(
    not HAVE_TORCH or not (TOKENIZER_DIR / "tokenizer.json").is_file(),
    reason="torch and sentence-transformers are not installed (the gpu extra)"
    if not HAVE_TORCH
    else f"no tokenizer files in {TOKENIZER_DIR}",
)

TEXTS = [
    "Caroline went to the LGBTQ support group on Tuesday.",
    "Melanie painted a sunrise over the lake.",
    "The invoice INV-20931 is due next week.",
    "",
    "A much longer text about travel plans: a flight to Osaka, a ramen place near the "
    "station, and a museum of modern art that opens at nine in the morning.",
]


def _tiny_bert(directory: Path, *, classifier: bool) -> Path:
    """A one-layer, 32-wide, randomly initialised BERT with the MiniLM WordPiece tokenizer,
    saved to ``directory``."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, BertModel

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=128,
        num_labels=1,
        # Wide initial weights, so that different texts get clearly different outputs.
        initializer_range=0.5,
    )
    model = BertForSequenceClassification(config) if classifier else BertModel(config)
    model.eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def embedder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sentence-transformers model directory: the tiny BERT plus mean pooling."""
    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # sentence-transformers before 6
        from sentence_transformers.models import Pooling, Transformer
    from sentence_transformers import SentenceTransformer

    root = tmp_path_factory.mktemp("st")
    bert = _tiny_bert(root / "bert", classifier=False)
    encoder = Transformer(str(bert), max_seq_length=64)
    pooling = Pooling(32, pooling_mode="mean")
    model = SentenceTransformer(modules=[encoder, pooling], device="cpu")
    target = root / "tiny-embedder"
    model.save(str(target))
    return target


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_bert(tmp_path_factory.mktemp("ce") / "tiny-cross-encoder", classifier=True)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@needs_torch
async def test_embedder_returns_unit_vectors_in_order_on_cpu(
    embedder_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = SentenceTransformersEmbedder(str(embedder_dir), device="cpu", batch_size=2)
    assert isinstance(embedder, Embedder)
    with caplog.at_level(logging.INFO, logger="memmachine.adapters.torch.torch_runtime"):
        await embedder.start()
    assert "torch embedder tiny-embedder runs on cpu (torch " in caplog.text
    async with embedder:
        assert embedder.device == "cpu"
        assert embedder.dimensions == 32
        assert embedder.model == "tiny-embedder"
        vectors = await embedder.embed(TEXTS)
        one_by_one = [(await embedder.embed([text]))[0] for text in TEXTS]
        reversed_batch = await embedder.embed(TEXTS[::-1])
        assert await embedder.embed([]) == []

    assert len(vectors) == len(TEXTS)
    assert all(len(vector) == 32 for vector in vectors)
    for vector in vectors:
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-5)
    for batched, single, backwards in zip(vectors, one_by_one, reversed_batch[::-1], strict=True):
        assert batched == pytest.approx(single, abs=1e-5)
        assert backwards == pytest.approx(batched, abs=1e-5)
    assert len({tuple(round(x, 4) for x in vector) for vector in vectors}) == len(TEXTS)


@needs_torch
async def test_embedder_default_device_is_cpu_without_cuda(embedder_dir: Path) -> None:
    import torch

    embedder = SentenceTransformersEmbedder(str(embedder_dir))
    await embedder.start()
    try:
        assert embedder.device.startswith("cuda" if torch.cuda.is_available() else "cpu")
    finally:
        await embedder.close()
    with pytest.raises(StoreError) as caught:
        await embedder.embed(["after close"])
    assert caught.value.store == "embedder"


@needs_torch
async def test_embedder_refuses_cuda_without_a_gpu(embedder_dir: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    embedder = SentenceTransformersEmbedder(str(embedder_dir), device="cuda")
    with pytest.raises(ConfigurationError, match="MEMMACHINE_EMBEDDING_DEVICE=cuda"):
        await embedder.start()


@needs_torch
async def test_embedder_that_cannot_load_says_which_model(tmp_path: Path) -> None:
    missing = tmp_path / "no-model-here"
    embedder = SentenceTransformersEmbedder(str(missing), device="cpu")
    with pytest.raises(ConfigurationError, match="no-model-here"):
        await embedder.start()


@needs_torch
async def test_reranker_scores_each_text_in_order(
    cross_encoder_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reranker = CrossEncoderReranker(str(cross_encoder_dir), device="cpu", batch_size=2)
    assert isinstance(reranker, Reranker)
    query = "when did Caroline go to the support group?"
    with caplog.at_level(logging.INFO, logger="memmachine.adapters.torch.torch_runtime"):
        await reranker.start()
    assert "cross-encoder reranker tiny-cross-encoder runs on cpu" in caplog.text
    async with reranker:
        assert reranker.device == "cpu"
        assert reranker.model == "tiny-cross-encoder"
        scores = await reranker.score(query, TEXTS)
        one_by_one = [(await reranker.score(query, [text]))[0] for text in TEXTS]
        reversed_batch = await reranker.score(query, TEXTS[::-1])
        other_query = await reranker.score("invoice due date", TEXTS)
        assert await reranker.score(query, []) == []

    assert len(scores) == len(TEXTS)
    assert all(isinstance(score, float) and math.isfinite(score) for score in scores)
    assert scores == pytest.approx(one_by_one, abs=1e-5)
    assert reversed_batch[::-1] == pytest.approx(scores, abs=1e-5)
    assert len({round(score, 6) for score in scores}) == len(TEXTS)
    assert other_query != pytest.approx(scores, abs=1e-6)
    with pytest.raises(StoreError) as caught:
        await reranker.score(query, ["after close"])
    assert caught.value.store == "reranker"


@needs_torch
async def test_reranker_start_is_idempotent_and_concurrent_calls_agree(
    cross_encoder_dir: Path,
) -> None:
    reranker = CrossEncoderReranker(str(cross_encoder_dir), device="cpu")
    await asyncio.gather(reranker.start(), reranker.start())
    try:
        results = await asyncio.gather(*(reranker.score("support group", TEXTS) for _ in range(4)))
    finally:
        await reranker.close()
        await reranker.close()
    for result in results[1:]:
        assert result == pytest.approx(results[0], abs=1e-6)


@needs_torch
async def test_reranker_refuses_a_model_with_several_labels(tmp_path: Path) -> None:
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=37,
        num_labels=3,
    )
    BertForSequenceClassification(config).save_pretrained(tmp_path / "three")
    tokenizer.save_pretrained(tmp_path / "three")
    reranker = CrossEncoderReranker(str(tmp_path / "three"), device="cpu")
    with pytest.raises(ConfigurationError, match="3 output labels"):
        await reranker.start()


@pytest.mark.parametrize(
    ("adapter", "what"),
    [
        ("SentenceTransformersEmbedder", "the torch embedder"),
        ("CrossEncoderReranker", "the cross-encoder reranker"),
    ],
)
def test_without_torch_start_says_to_install_the_gpu_extra(adapter: str, what: str) -> None:
    code = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.modules["torch"] = None
        from memmachine.errors import ConfigurationError
        from memmachine.adapters.torch.cross_encoder_reranker import CrossEncoderReranker
        from memmachine.adapters.torch.sentence_transformers_embedder import (
            SentenceTransformersEmbedder,
        )
        try:
            asyncio.run({adapter}("some/model", device="cpu").start())
        except ConfigurationError as exc:
            print(exc.message)
        else:
            print("started")
        """
    )
    env: dict[str, Any] = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    message = out.stdout.strip()
    assert message.startswith(f"{what} needs torch and sentence-transformers")
    assert "uv sync --extra gpu" in message
    assert "memmachine-core[gpu]" in message


@needs_torch
async def test_torch_embedder_and_reranker_serve_a_whole_search(
    embedder_dir: Path, cross_encoder_dir: Path, tmp_path: Path
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        embedding=EmbeddingSettings(provider="torch", model=str(embedder_dir), device="cpu"),
        reranker=RerankerSettings(model=str(cross_encoder_dir), device="cpu"),
    )
    async with open_manager(settings) as manager:
        health = await manager.health()
        assert health.mode == "hybrid"
        assert (health.embedder.model, health.embedder.dimensions) == ("tiny-embedder", 32)
        assert health.reranker.enabled
        assert health.reranker.model == "tiny-cross-encoder"
        scope = Scope(user_id="gpu", session_id="s1")
        await manager.add_messages(scope, [NewMessage(content=text) for text in TEXTS if text])
        found = await manager.search_episodes(scope, "support group", top_k=3)
    assert len(found) == 3
    assert [hit.ranks["rerank"] for hit in found] == [1, 2, 3]
    assert all(0.0 <= hit.score <= 1.0 for hit in found)
    assert found[0].score == 1.0


# ---------------------------------------------------------------------- the device log line


def test_the_device_line_names_the_gpu_in_use() -> None:
    level, line = device_report(
        "torch embedder m",
        "cuda:0",
        torch_version="2.9.0",
        cuda_build="13.0",
        cuda_available=True,
        gpu_name="NVIDIA L4",
    )
    assert level == logging.INFO
    assert line == "torch embedder m runs on cuda:0 (NVIDIA L4, torch 2.9.0, CUDA 13.0)"


def test_a_cuda_torch_that_sees_no_gpu_warns_that_it_runs_on_the_cpu() -> None:
    """The GPU image on a host whose driver is too old for torch's CUDA: the one line an
    operator needs, at WARNING."""
    level, line = device_report(
        "cross-encoder reranker r",
        "cpu",
        torch_version="2.9.0",
        cuda_build="13.0",
        cuda_available=False,
    )
    assert level == logging.WARNING
    assert line.startswith("cross-encoder reranker r runs on the CPU: torch 2.9.0 is built ")
    assert "a driver too old for CUDA 13.0" in line


def test_a_cpu_build_of_torch_runs_on_the_cpu_quietly() -> None:
    level, line = device_report(
        "torch embedder m", "cpu", torch_version="2.9.0", cuda_build=None, cuda_available=False
    )
    assert (level, line) == (
        logging.INFO,
        "torch embedder m runs on cpu (torch 2.9.0, built without CUDA)",
    )
